"""The project's own tiny hybrid models, built on demand and cached by content.

A canary's identity is its recipe (parameters + the builder script's bytes): the
builder is deterministic, so the recipe digest names the weights before they exist,
and ``sweep plan`` can print cell ids without building anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from filelock import FileLock

from orchestrator.cells import ModelRef, digest
from orchestrator.paths import cache_dir
from orchestrator.spec import ModelSpec

BUILDER = Path(__file__).resolve().parent.parent / "images" / "canary" / "build_canary.py"
CORPUS = BUILDER.with_name("corpus.py")

# name -> builder arguments. Dimensions the CPU kernels accept (GDN head dim 128).
# "tiny-qwen3next" is trained for a few CPU minutes on the recall corpus so its greedy
# choices are confident and depend on the carried state, and its MTP head is trained
# to draft for it (so speculative decoding accepts drafts, as with a real model);
# "random-qwen3next" is the untrained model (fast to build, blind to state
# corruption, MTP acceptance ~0%: kept for comparison).
CANARIES: dict[str, dict[str, Any]] = {
    "tiny-qwen3next": {"seed": 0, "hidden": 128, "layers": 4, "vocab": 1024,
                       "train_steps": 300, "mtp_steps": 150, "batch": 8, "seq_len": 384},
    "random-qwen3next": {"seed": 0, "hidden": 128, "layers": 4, "vocab": 1024},
}

# Symptoms that are properties of a canary, not of the stack serving it. The untrained
# model's MTP head is random (build_canary.py writes mtp.* weights so vLLM loads them),
# so speculative acceptance is ~0% on any healthy engine (0.2-1.3% measured,
# shared/ENGINES.md): reported in evidence, never blamed. The trained canary's head is
# trained, so a stuck acceptance rate there is the stack's fault.
CANARY_EXCUSED_SYMPTOMS: dict[str, tuple[str, ...]] = {"random-qwen3next": ("acceptance_low",)}


def excused_symptoms(model_name: str) -> tuple[str, ...]:
    """Symptom kinds the grader must not blame on the stack for this model."""
    return CANARY_EXCUSED_SYMPTOMS.get(model_name.removeprefix("canary:"), ()) if is_canary(model_name) else ()


def is_canary(model_name: str) -> bool:
    return model_name.startswith("canary:")


class CanaryError(ValueError):
    pass


def _recipe(name: str) -> dict[str, Any]:
    if name not in CANARIES:
        raise CanaryError(f"unknown canary '{name}' (known: {', '.join(CANARIES)})")
    code = hashlib.sha256(BUILDER.read_bytes() + CORPUS.read_bytes()).hexdigest()
    return {"name": name, "args": CANARIES[name], "builder": code}


def canary_dir(name: str) -> Path:
    return cache_dir() / "canaries" / f"{name}-{digest(_recipe(name))[:12]}"


META = "vmatrix-canary.json"  # in the canary's folder: its recipe, and what its build measured


def logit_scale(model_name: str) -> float | None:
    """The canary's largest top-1 logit magnitude, as its build recorded it (key
    ``logit_scale`` of ``vmatrix-canary.json`` in its folder): where its confident choices
    are made, so the bf16 resolution its margins are rounded to (jobs.grade.scaled_tie_margin).
    None for a model that is not a canary, a canary not built here, or one whose build
    recorded none.
    """
    name = model_name.removeprefix("canary:")
    if not is_canary(model_name) or name not in CANARIES:
        return None
    try:
        meta = json.loads((canary_dir(name) / META).read_text())
    except (OSError, ValueError):
        return None
    value = meta.get("logit_scale") if isinstance(meta, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value)


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
    if spec.canary is not None:
        return ModelRef(path=str(canary_dir(spec.canary)), digest=digest(_recipe(spec.canary)), name=f"canary:{spec.canary}")
    path = Path(spec.path or "").expanduser().resolve()
    if not (path / "config.json").is_file():
        raise CanaryError(f"{path}: not a model folder (no config.json)")
    return ModelRef(path=str(path), digest=files_digest(path), name=path.name)


def ensure_canary(name: str, python: Path, log: Path | None = None) -> Path:
    """Build the canary with ``python`` (an engine venv's interpreter) unless cached.

    Built into a temporary folder and renamed, under a lock, so a crash mid-build or
    two sweeps at once never leave a half-written model that later cells would load.
    """
    out = canary_dir(name)
    if (out / "config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if (out / "config.json").is_file():
            return out
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        args = CANARIES[name]
        argv = [str(python), str(BUILDER), str(tmp)]
        for key, value in args.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if log is not None:
            log.write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise CanaryError(f"building canary '{name}' failed: {last}")
        # The builder may write what it measured (e.g. `logit_scale`) into the same file;
        # kept, with the recipe written over it.
        try:
            measured = json.loads((tmp / META).read_text())
        except (OSError, ValueError):
            measured = {}
        (tmp / META).write_text(json.dumps((measured if isinstance(measured, dict) else {}) | _recipe(name), indent=2))
        tmp.rename(out)
    return out
