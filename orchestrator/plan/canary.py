"""The project's own tiny hybrid models: shipped trained, or built on demand and cached.

A canary's identity is its recipe (parameters + the builder script's bytes): the
recipe digest names the weights before they exist, and ``sweep plan`` can print cell
ids without building anything.

A trained canary is committed under ``images/canary/shipped/NAME/`` with its recipe and
the digest of every file (``vmatrix-canary.json``): its training takes a GPU for minutes,
and a fresh machine should serve it, not train it. It is served only while its recorded
recipe is the repository's (the same builder, corpus and arguments); otherwise it is
rebuilt from the recipe, which is what ``vmatrix canary build --train`` does on purpose.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from vmatrix.cells import ModelRef, digest
from vmatrix.errors import CanaryError
from vmatrix.orchestrator.paths import cache_dir
from vmatrix.orchestrator.plan.lineage import LINEAGES, lineage_code
from vmatrix.orchestrator.spec.engines import ModelSpec
from vmatrix.orchestrator.stack.engine_args import path_trap

BUILDER = Path(__file__).resolve().parents[2] / "images" / "canary" / "build_canary.py"
CORPUS = BUILDER.with_name("corpus.py")
DRAFTER_BUILDER = BUILDER.with_name("build_drafter.py")
# Nemotron-H (Mamba2) canaries: their builder imports build_canary.py's tokenizer, curriculum
# and training loop, so both builders' bytes are their recipe's identity.
NEMOTRONH_BUILDER = BUILDER.with_name("build_nemotronh.py")
# Granite-4.0-H (Mamba2 + attention, no MTP head): untrained, its builder imports build_canary.py's tokenizer.
GRANITE_BUILDER = BUILDER.with_name("build_granitehybrid.py")
SHIPPED = BUILDER.with_name("shipped")
META = "vmatrix-canary.json"  # in a canary's folder: its recipe, file digests and what its build measured
BUILD_REPORT = "canary-report.json"  # what a builder (images/canary/build_*.py) measured, beside its weights

# name -> builder arguments (a list: the flag repeated, in order). Dimensions the CPU
# kernels accept (GDN head dim 128). "tiny-qwen3next" is trained on a GPU to recall its
# corpus at the replays' prefix lengths, and its MTP head to draft for it: the
# curriculum of images/canary/README.md, run on an H200 in ~19 minutes and shipped
# (SHIPPED). "random-qwen3next" is the untrained model (fast to build, blind to state
# corruption, MTP acceptance ~0%: kept for comparison).
# The length curriculum both families train with (same tokens, same lengths).
_CURRICULUM: dict[str, Any] = {
    "stage": ["lines=2-12 batch=64 steps=4000 lr=3e-3 until=0.05",
              "lines=12-120 batch=16 steps=600 lr=2e-3",
              "lines=120-600 batch=4 steps=400 lr=1.5e-3 turns=16",
              "lines=600-1700 batch=2 steps=220 lr=1e-3 turns=24"],
    "mtp_stage": ["lines=4-120 batch=16 steps=500 lr=2e-3",
                  "lines=120-600 batch=4 steps=150 lr=1e-3 turns=16"],
    "report_lengths": "1500,10000,20000",
}
CANARIES: dict[str, dict[str, Any]] = {
    "tiny-qwen3next": {
        "seed": 1, "hidden": 128, "layers": 4, "vocab": 1024, "device": "cuda",
        **_CURRICULUM,
    },
    "random-qwen3next": {"seed": 0, "hidden": 128, "layers": 4, "vocab": 1024},
    # Untrained, built in seconds on the CPU: whether an engine loads and serves the
    # architecture at all, without tiny-nemotronh's GPU passes.
    "random-nemotronh": {"seed": 0, "hidden": 128, "pattern": "M-M-M-*-", "vocab": 1024},
    # The same for IBM's Granite-4.0-H (GraniteMoeHybridForCausalLM: the same Mamba2 mixer
    # in vLLM, no MTP head), dense as Granite-4.0-H-Micro (issue 41, item 4).
    "random-granitehybrid": {"seed": 0, "hidden": 128, "vocab": 1024},
}

# The builder of each canary not written by build_canary.py.
CANARY_BUILDERS: dict[str, Path] = {"random-nemotronh": NEMOTRONH_BUILDER, "random-granitehybrid": GRANITE_BUILDER}

# The second family (issue 41), trained: tiny-nemotronh (Mamba2 mixers, attention, an MTP
# head) took passes on lent GPUs, each from the last one's build; its recipe is that lineage
# (orchestrator/plan/lineage.py), the device each pass ran on being a CUDA card.
LINEAGE_DEVICE = "cuda"

# Trained recipes whose checkpoint is not shipped yet, and why: asked for, they say so in
# one line instead of training behind the user's back. An entry leaves when its canary is
# shipped (tests/test_canary.py holds both ways).
PENDING: dict[str, str] = {}

# name -> build_drafter.py arguments: tiny DFlash / DFlash2 drafters (vLLM's
# DFlashDraftModel / DFlash2DraftModel) for a canary, trained on the CPU on that canary's
# own hidden states (images/canary/README.md, "Drafters"), shipped like it. ``target``
# names the canary; its recipe is part of the drafter's. Served as
# `speculative: {method: dflash, model: canary:NAME}`, with k = block - 1. The names
# must not contain "dflash", "eagle-", "eagle3" or "dspark": vLLM guesses the method
# from the drafter's path (docs/dflash2.md).
DRAFTERS: dict[str, dict[str, Any]] = {
    "tiny-qwen3next-df1": {"target": "tiny-qwen3next", "kind": "dflash", "seed": 0, "block": 5, "docs": 48,
                           "lines": "4-32", "steps": 500},
    "tiny-qwen3next-df2": {"target": "tiny-qwen3next", "kind": "dflash2", "seed": 0, "block": 5, "docs": 48,
                           "lines": "4-32", "steps": 500},
}

# Symptoms that are properties of a canary, not of the stack serving it. The untrained
# model's MTP head is random (build_canary.py writes mtp.* weights so vLLM loads them),
# so speculative acceptance is ~0% on any healthy engine (0.2-1.3% measured,
# shared/ENGINES.md): reported in evidence, never blamed. The trained canary's head is
# trained, so a stuck acceptance rate there is the stack's fault.
CANARY_EXCUSED_SYMPTOMS: dict[str, tuple[str, ...]] = {"random-qwen3next": ("acceptance_low",),
                                                        "random-nemotronh": ("acceptance_low",)}


def excused_symptoms(model_name: str) -> tuple[str, ...]:
    """Symptom kinds the grader must not blame on the stack for this model."""
    return CANARY_EXCUSED_SYMPTOMS.get(model_name.removeprefix("canary:"), ()) if is_canary(model_name) else ()


def is_canary(model_name: str) -> bool:
    return model_name.startswith("canary:")


def is_drafter(name: str) -> bool:
    return name in DRAFTERS


def canary_recipe(name: str) -> dict[str, Any]:
    """A canary's or a drafter's identity: its arguments and its builder's bytes (for a
    drafter also the recipe of the canary it was trained on)."""
    if name in DRAFTERS:
        target = digest(canary_recipe(DRAFTERS[name]["target"])).encode()
        code = hashlib.sha256(DRAFTER_BUILDER.read_bytes() + BUILDER.read_bytes() + CORPUS.read_bytes()
                              + target).hexdigest()
        return {"name": name, "args": DRAFTERS[name], "builder": code}
    if name in LINEAGES:
        return {"name": name, "builder": lineage_code(LINEAGES[name], CORPUS),
                "args": {"device": LINEAGE_DEVICE, "passes": [one.recorded() for one in LINEAGES[name]]}}
    if name not in CANARIES:
        raise CanaryError(f"unknown canary '{name}' (known: {', '.join([*CANARIES, *LINEAGES])})")
    # build_canary.py's canaries: its bytes and the corpus' (as they always were, so their
    # shipped checkpoints keep their recipe); another builder's bytes come first.
    code = hashlib.sha256((CANARY_BUILDERS[name].read_bytes() if name in CANARY_BUILDERS else b"")
                          + BUILDER.read_bytes() + CORPUS.read_bytes()).hexdigest()
    return {"name": name, "args": CANARIES[name], "builder": code}


DRAFT_PREFIX = "canary:"  # speculative.model: canary:NAME names a drafter of DRAFTERS


def draft_ref(model: str | None) -> str | None:
    """The drafter a `speculative.model` value names (``canary:NAME``), else None; an
    unknown name is a CanaryError naming the field."""
    if not model or not model.startswith(DRAFT_PREFIX):
        return None
    name = model.removeprefix(DRAFT_PREFIX)
    if name not in DRAFTERS:
        raise CanaryError(f"speculative.model: unknown drafter '{model}' (known: "
                          f"{', '.join(DRAFT_PREFIX + n for n in DRAFTERS)})")
    return name


def draft_dir(knobs: dict[str, Any]) -> Path | None:
    """The folder the engine loads a cell's canary drafter from, if it names one."""
    spec = knobs.get("speculative") or {}
    name = draft_ref(spec.get("model"))
    return canary_dir(name) if name else None


def built_dir(name: str) -> Path:
    """Where a build of the canary's recipe on this machine goes."""
    return cache_dir() / "canaries" / f"{name}-{digest(canary_recipe(name))[:12]}"


def shipped_dir(name: str) -> Path | None:
    """The committed checkpoint of this canary, if the repository's recipe made it."""
    meta = SHIPPED / name / META
    try:
        recorded = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    same = {k: recorded.get(k) for k in ("name", "args", "builder")} == canary_recipe(name)
    return meta.parent if same else None


def on_host_path(model_path: str) -> str:
    """A canary's folder, or where a copy of it lies that a Docker daemon can mount.

    The shipped checkpoints live in the vmatrix package, which on a Compose node is
    inside the node's image (twice: the source folder and site-packages, and the
    driver's and a task's imports need not agree on which): a path the daemon, the
    host's, cannot see. The vmatrix cache is a host path mounted at the same path on
    every node (compose.yaml), so an engine container is handed a copy there (8 MB,
    made once per checkpoint).
    """
    path = Path(model_path)
    if path.is_relative_to(cache_dir()):
        return model_path
    copy = cache_dir() / "canaries" / f"shipped-{path.name}-{digest(shipped_files(path))[:12]}"
    if not (copy / META).is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(copy) + ".lock"):
            if not (copy / META).is_file():
                tmp = copy.with_name(copy.name + ".tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(path, tmp)
                shutil.rmtree(copy, ignore_errors=True)
                tmp.rename(copy)
    return str(copy)


def untrapped(path: str, method: str) -> str:
    """PATH, or the cache's copy of this canary (``on_host_path``) where PATH names another
    speculative method than METHOD (orchestrator.stack.engine_args.path_trap): the checkout's
    folder name must not decide what a cell measures. A cache folder that names one too
    is refused when the matrix is planned (orchestrator.plan.matrix)."""
    return on_host_path(path) if path_trap(path, method) else path


def served_paths(model_path: str, model_name: str, knobs: dict[str, Any]) -> tuple[str, str | None]:
    """The target's and the drafter's folders a cell's engine is handed: the canary's,
    copied out of a folder whose path would change the speculative method."""
    spec = knobs.get("speculative") or {}
    draft = draft_dir(knobs)
    method = spec.get("method")
    if not method:
        return model_path, None
    if draft is not None:
        return model_path, untrapped(str(draft), method)
    if not spec.get("model") and is_canary(model_name):  # MTP: the target is the draft model
        return untrapped(model_path, method), None
    return model_path, None


def canary_dir(name: str) -> Path:
    """The folder engines load the canary from: the shipped checkpoint, else a build."""
    return shipped_dir(name) or built_dir(name)


def shipped_files(folder: Path) -> dict[str, str]:
    """sha256 of every file of a checkpoint folder but its metadata, by relative path."""
    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file() and f.name != META}


def logit_scale(model_name: str, folder: str | Path | None = None) -> float | None:
    """The canary's largest top-1 logit magnitude, as its build recorded it (key
    ``logit_scale`` of ``vmatrix-canary.json`` in its folder): where its confident choices
    are made, so the bf16 resolution its margins are rounded to (jobs.noise.scaled_tie_margin).
    A model given by ``folder`` (a build not shipped, such as n1c) is read the same way, or
    from the builder's own report beside its weights (``canary-report.json``). None for a
    model no build of which recorded one, or a canary not built here.
    """
    name = model_name.removeprefix("canary:")
    if is_canary(model_name):
        places = [canary_dir(name) / META] if name in CANARIES or name in LINEAGES else []
    else:
        places = [Path(folder) / META, Path(folder) / BUILD_REPORT] if folder else []
    for place in places:
        try:
            meta = json.loads(place.read_text())
        except (OSError, ValueError):
            continue
        value = meta.get("logit_scale") if isinstance(meta, dict) else None
        if not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0:
            return float(value)
    return None


def files_digest(folder: Path) -> str:
    """Digest of a model folder. Large weight files are sampled (size + head + tail)
    so a 50 GB checkpoint is not read in full on every plan."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + b"\0")
        size = f.stat().st_size
        with f.open("rb") as fh:
            if size <= 64 << 20:
                h.update(fh.read())
            else:
                h.update(str(size).encode() + fh.read(1 << 20))
                fh.seek(-(1 << 20), os.SEEK_END)
                h.update(fh.read())
    return h.hexdigest()


def model_ref(spec: ModelSpec) -> ModelRef:
    if spec.canary is not None and is_drafter(spec.canary):
        raise CanaryError(f"'{spec.canary}' is a drafter, not a model to serve: give it as "
                          f"`speculative: {{method: dflash, model: canary:{spec.canary}}}`")
    if spec.canary is not None:
        return ModelRef(path=str(canary_dir(spec.canary)), digest=digest(canary_recipe(spec.canary)), name=f"canary:{spec.canary}")
    path = Path(spec.path or "").expanduser().resolve()
    if not (path / "config.json").is_file():
        raise CanaryError(f"{path}: not a model folder (no config.json)")
    return ModelRef(path=str(path), digest=files_digest(path), name=path.name)


Progress = Callable[[dict[str, Any]], None]  # one builder progress record: what, step, steps, loss ...


def needs_training(name: str) -> bool:
    if name in DRAFTERS:
        return bool(DRAFTERS[name]["steps"])
    if name in LINEAGES:
        return True
    return bool(CANARIES[name].get("stage") or CANARIES[name].get("mtp_stage"))


def builder_argv(python: Path, out: Path, args: dict[str, Any], builder: Path = BUILDER) -> list[str]:
    """The builder's command line for a recipe's arguments (a list value: its flag repeated;
    True: the flag alone)."""
    argv = [str(python), str(builder), str(out)]
    for key, value in args.items():
        for one in value if isinstance(value, list) else [value]:
            flag = f"--{key.replace('_', '-')}"
            argv += [flag] if one is True else [] if one is False else [flag, str(one)]
    return argv


def ensure_canary(name: str, python: Path, log: Path | None = None, train: bool = False,
                  progress: Progress | None = None, device: str | None = None) -> Path:
    """The canary's folder: the shipped checkpoint, a cached build, or a new build with
    ``python`` (an engine venv's interpreter, or any with torch and transformers).

    A trained canary is built only when asked (``train``): its recipe runs for minutes on
    a GPU, and a fresh machine is meant to serve the shipped one. ``train`` also builds
    past a cached or shipped copy, into the build folder, so a rebuild can be compared
    with what is shipped. Built into a temporary folder and renamed, under a lock, so a
    crash mid-build or two sweeps at once never leave a half-written model.
    """
    if not train:
        found = canary_dir(name)
        if (found / "config.json").is_file():
            return found
        if name in PENDING and shipped_dir(name) is None:
            raise CanaryError(f"canary '{name}': {PENDING[name]}")
        if needs_training(name):
            raise CanaryError(
                f"canary '{name}': no shipped checkpoint made by this recipe ({SHIPPED / name} is missing, or the "
                f"builder, corpus or arguments changed since it was trained); rebuild it with "
                f"`vmatrix canary build {name} --train` (on a GPU host: see images/canary/README.md)")
    out = built_dir(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not train and (out / "config.json").is_file():
            return out
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        lines: list[str] = []
        try:
            for argv, label in _builder_runs(name, python, tmp, device):
                _run_builder(name, argv, label, lines, progress)
        finally:
            if log is not None:
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text("".join(lines))
        for passed in tmp.parent.glob(f"{tmp.name}.pass-*"):
            shutil.rmtree(passed)
        report = tmp / "canary-report.json"
        measured = json.loads(report.read_text()) if report.is_file() else {}
        meta = canary_recipe(name) | {"files": shipped_files(tmp)}
        if "logit_scale" in measured:
            meta["logit_scale"] = measured["logit_scale"]
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out


def _builder_runs(name: str, python: Path, out: Path, device: str | None) -> list[tuple[list[str], str]]:
    """The builder command lines that make canary NAME in OUT, in order, each with a label
    for its progress (empty for a recipe of one run). A lineage's passes build into folders
    beside OUT, each from the last one's (``--init-from``), the last into OUT."""
    if name in DRAFTERS:
        # Trained on the target canary's folder; always on the CPU, one thread.
        args = {k: v for k, v in DRAFTERS[name].items() if k != "target"}
        args["target"] = str(ensure_canary(DRAFTERS[name]["target"], python))
        return [(builder_argv(python, out, args, DRAFTER_BUILDER), "")]
    if name not in LINEAGES:
        args = dict(CANARIES[name]) | ({"device": device} if device else {})
        return [(builder_argv(python, out, args, CANARY_BUILDERS.get(name, BUILDER)), "")]
    runs, before = [], None
    passes = LINEAGES[name]
    for index, one in enumerate(passes):
        folder = out if index == len(passes) - 1 else out.with_name(f"{out.name}.pass-{index}")
        shutil.rmtree(folder, ignore_errors=True)
        args = one.args | {"device": device or LINEAGE_DEVICE} | ({"init_from": str(before)} if before else {})
        runs.append((builder_argv(python, folder, args, BUILDER.with_name(one.builder)), one.name))
        before = folder
    return runs


def _run_builder(name: str, argv: list[str], label: str, lines: list[str], progress: Progress | None) -> None:
    """Run one builder, its output appended to LINES and its progress records handed on
    (named by LABEL, a lineage's pass); a CanaryError with its last line if it fails."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    if label:
        lines.append(f"== pass {label}: {' '.join(argv[1:])}\n")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if progress is not None and line.startswith("progress {"):
                record = json.loads(line[len("progress "):])
                progress(record | ({"what": f"{label} {record.get('what', 'train')}"} if label else {}))
    if proc.returncode != 0:
        last = ([x for x in lines if x.strip()] or ["no output"])[-1].strip()
        where = f" (pass {label})" if label else ""
        raise CanaryError(f"building canary '{name}' failed{where}: {last}")
