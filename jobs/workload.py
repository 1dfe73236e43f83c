"""Shared-prefix agent workloads, generated deterministically from a seed.

The shape is the reproduction users describe (shared/DOMAIN.md): one long shared
prefix (system prompt, tool schemas, persona), several sessions of several turns
sent concurrently so prefills share the token budget, then "agent switches": new
sessions that hit the same prefix and differ only at the tail. Histories are fixed
text, never the live output, so every request is comparable with its control.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any, Literal, Protocol

from vmatrix.expect import Expectation
from vmatrix.images.canary import corpus
from vmatrix.jobs.shapes import LAYOUT_VERSION, ShapeParams, build_shapes
from vmatrix.workload import Api, ReplayRequest, Workload


class WorkloadParams(Protocol):
    """What a workload is built from: the matrix's ``workload:`` section
    (``orchestrator.spec.WorkloadSpec`` is one), read-only here."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> Literal["shared_prefix", "trace"]: ...
    @property
    def trace(self) -> str | None: ...
    @property
    def seed(self) -> int: ...
    @property
    def prefix_tokens(self) -> int: ...
    @property
    def sessions(self) -> int: ...
    @property
    def turns(self) -> int: ...
    @property
    def agent_switches(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def top_logprobs(self) -> int: ...
    @property
    def probe_block_tokens(self) -> int | None: ...
    @property
    def api(self) -> Api: ...
    @property
    def shapes(self) -> Sequence[ShapeParams] | None: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...

# Tokens before the first definition line's name (chat header, HEADER, the tools line and
# the newline), and before each definition's words ("\n", "var", "_", four digits, " ="),
# with the shipped canary's tokenizer, which makes one token of every word (measured;
# tests/test_canary.py checks all three against it): token positions in a canary prompt
# are exact.
PREAMBLE_TOKENS = 40
TOKENS_BEFORE_WORDS = 8
# What the sessions share past the system prompt: "<|im_end|>\n<|im_start|>user\nturn ".
SHARED_TAIL_TOKENS = 7


def word_starts(defs: list[str]) -> list[int]:
    """The token index of each definition's first word in a canary system prompt."""
    starts, at = [], PREAMBLE_TOKENS - 1  # the first line's newline is the preamble's
    for d in defs:
        starts.append(at + TOKENS_BEFORE_WORDS)
        at += TOKENS_BEFORE_WORDS + len(d.split()) - 2
    return starts


def align_boundary(defs: list[str], block_tokens: int) -> tuple[list[str], int | None]:
    """Definitions shortened so that the last cached block of the shared prefix ends right
    after a line's name, and that line; None when the prefix fills no block.

    A request that hits the prefix cache restores the carried state at a block boundary
    and computes what follows from it. The words of the line the boundary falls in are
    then read through keys computed from the restored state, with their name known only
    to that state; every other line either came from the cache or wrote its own name after
    the restore (docs/GRADING.md, "Sensitivity"). So the line whose words start exactly at
    the boundary is the one answer a wrong carried state changes. Lines before it lose or
    gain a few words at their end (each keeps the 3 to 6 of the training corpus) to put it
    there; None also when that would move the boundary itself.
    """
    def shared(lines: list[str]) -> int:
        return word_starts(lines)[-1] + len(lines[-1].split()) - 2 + SHARED_TAIL_TOKENS

    boundary = shared(defs) // block_tokens * block_tokens
    starts = word_starts(defs)
    if boundary <= starts[0]:
        return defs, None
    # The first line starting at or after the boundary moves up to it (words dropped before
    # it); when the boundary is past the last line's start, that line moves down (words added).
    line = next((i for i, start in enumerate(starts) if start >= boundary), len(defs) - 1)
    shift = boundary - starts[line]
    filler = random.Random(line)
    out = list(defs)
    for i in range(line - 1, -1, -1):
        if shift == 0:
            break
        words = out[i].split()
        n = max(shift, 3 - (len(words) - 2)) if shift < 0 else min(shift, 6 - (len(words) - 2))
        words = words[:len(words) + n] if n < 0 else words + [filler.choice(corpus.WORDS) for _ in range(n)]
        out[i] = " ".join(words)
        shift -= n
    if shift or shared(out) // block_tokens * block_tokens != boundary:
        return defs, None
    return out, line


def probe_problem(prefix_tokens: int, block_tokens: int) -> str:
    return (f"probe_block_tokens: a {prefix_tokens}-token prefix cannot be laid out so that a {block_tokens}-token "
            "block ends right after a definition's name (it must fill at least one block)")


def probe_fits(seed: int, prefix_tokens: int, block_tokens: int) -> bool:
    """Whether :func:`build_workload` can lay this prefix out for probing."""
    _, defs = corpus.system_prompt(random.Random(seed), corpus.lines_for(prefix_tokens))
    return align_boundary(defs, block_tokens)[1] is not None


PROBE_TAIL_LINES = 4  # lines before the probed one that a session's prompt has of its own


def session_tails(rng: random.Random, defs: list[str], probe: int, sessions: int) -> list[list[str]]:
    """``sessions`` system prompts' definitions: the first is ``defs``; the others replace
    the lines from :data:`PROBE_TAIL_LINES` before ``probe`` on by definitions of names no
    prompt uses, with as many words each, so every token position (and the block boundary
    right after the probed line's name) stays where it is."""
    start = max(0, probe - PROBE_TAIL_LINES)
    used = {d.split(" = ")[0] for d in defs}
    free = [n for n in range(corpus.NAMES) if f"var_{n:04d}" not in used]
    picks = iter(rng.sample(free, (sessions - 1) * (len(defs) - start)))
    out = [defs]
    for _ in range(sessions - 1):
        tail = [f"var_{next(picks):04d} = " + " ".join(rng.choice(corpus.WORDS) for _ in range(len(d.split()) - 2))
                for d in defs[start:]]
        out.append(defs[:start] + tail)
    return out


# What a shaped workload is laid out on when the engine did not say its block (and no
# probe_block_tokens overrides it): the cell and its control then agree on a guess, and the
# grader reports the shapes as not placed on the engine's blocks.
GUESSED_BLOCK = 256


def layout_block(spec: WorkloadParams, engine_block: int | None) -> tuple[int | None, str]:
    """The block a workload is laid out on, and where it came from: ``probe_block_tokens``
    (an override), the engine's, or a guess; (None, "unshaped") for unshaped workloads."""
    if spec.shapes is None:
        return spec.probe_block_tokens, "probe_block_tokens" if spec.probe_block_tokens else "unshaped"
    if spec.probe_block_tokens is not None:
        return spec.probe_block_tokens, "probe_block_tokens"
    if engine_block is not None:
        return engine_block, "engine"
    return GUESSED_BLOCK, "guessed"


# A cell's workload is built once per process for what determines it: the spec, the block
# and the builders' version, and for a trace its file's state (a trace can change under a
# recorded cell, and repro must see that). Expansion's digest, the run, the grade and
# repro then share one value instead of building it again at each step. A sweep has a few
# workloads, each on a block or two; a shrink builds one per probe, and a probe's trace can
# be large, so only the newest few are kept.
_BUILT: OrderedDict[tuple[Any, ...], Workload] = OrderedDict()
_BUILT_KEPT = 32


def build_workload(spec: WorkloadParams, block: int | None = None, layout_version: int = LAYOUT_VERSION) -> Workload:
    """The requests of a workload; a shaped one laid out on ``block`` (the engine's, see
    :func:`layout_block`), which it needs, by the builders' ``layout_version`` (a recorded
    run's, to rebuild what it replayed). The same value for the same arguments in a process."""
    key = (json.dumps(spec.model_dump(mode="json"), sort_keys=True), block, layout_version,
           _file_state(spec.trace) if spec.kind == "trace" else None)
    if key in _BUILT:
        _BUILT.move_to_end(key)
    else:
        _BUILT[key] = _build(spec, block, layout_version)
        if len(_BUILT) > _BUILT_KEPT:
            _BUILT.popitem(last=False)
    return _BUILT[key]


def _file_state(path: str | None) -> tuple[int, int] | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if st else None


def _build(spec: WorkloadParams, block: int | None, layout_version: int) -> Workload:
    if spec.shapes is not None:
        if block is None:
            raise ValueError(f"workload {spec.name!r}: shapes are laid out on a block size; none given")
        phases = build_shapes(spec.shapes, block, spec.seed, layout_version)
        gated = {s.name for s in spec.shapes if getattr(s, "gate", False)}
        return Workload(name=spec.name, phases=tuple(phases), max_tokens=spec.max_tokens,
                        top_logprobs=spec.top_logprobs, api=spec.api, block_tokens=block,
                        gated=tuple(name for name, reqs in phases if reqs and reqs[0].shape in gated))
    if spec.kind == "trace":
        from vmatrix.jobs.traces import load_trace, trace_to_workload

        return replace(trace_to_workload(load_trace(spec.trace), spec.max_tokens, spec.top_logprobs), api=spec.api)
    rng = random.Random(spec.seed)
    lines = corpus.lines_for(spec.prefix_tokens)
    system, defs = corpus.system_prompt(rng, lines)
    # sid -> its system prompt, its definitions, and the line it probes (None: no probe).
    prompts: dict[str, tuple[str, list[str], int | None]] = {}
    sids = [f"s{s}" for s in range(spec.sessions + spec.agent_switches)]
    aligned, probe = align_boundary(defs, spec.probe_block_tokens) if spec.probe_block_tokens else (defs, None)
    if spec.probe_block_tokens and probe is None:
        # The spec validates this (WorkloadSpec._probe_fits); a workload that claims to probe
        # and does not would grade its prefix-caching cells untested.
        raise ValueError(probe_problem(spec.prefix_tokens, spec.probe_block_tokens))
    if probe is not None:
        # Each session's system prompt ends in its own last few lines (an agent switch takes
        # a session's), so the probes ask as many different lines, not one line again; the
        # lines before are the sessions' shared prefix, as without probing.
        head = system[:system.index("var_")]
        tails = session_tails(rng, aligned, probe, spec.sessions)
        for n, sid in enumerate(sids):
            mine = tails[n % spec.sessions]
            prompts[sid] = (head + "\n".join(mine), mine, probe)
    else:
        prompts = {sid: (system, defs, None) for sid in sids}
    # Recorded histories: each user turn asks for an identifier from the prefix, and
    # the recorded answer (sent back as history next turn) recites it correctly; it is
    # also what the request expects the model to answer.
    histories: dict[str, list[tuple[str, str]]] = {}
    probes: list[str] = []
    for s, sid in enumerate(sids):
        _, mine, probe = prompts[sid]
        histories[sid] = []
        for t in range(spec.turns):
            # A session's first request that hits the cache (turn 1; an agent switch's turn 0)
            # asks for the probed line; later turns do not: with it in the history the model
            # recites it from there (measured), whatever the restored state says.
            if probe is not None and t == (0 if s >= spec.sessions else 1):
                user, i = corpus.user_turn(rng, [mine[probe]], t)[0], probe
                probes.append(f"{sid}/{t}")
            else:
                user, i = corpus.user_turn(rng, mine, t)
            histories[sid].append((user, corpus.answer(mine, i)))

    def request(sid: str, turn: int, phase: str) -> ReplayRequest:
        msgs: list[tuple[str, str]] = [("system", prompts[sid][0])]
        for user, answer in histories[sid][:turn]:
            msgs += [("user", user), ("assistant", answer)]
        user, expected = histories[sid][turn]
        msgs.append(("user", user))
        return ReplayRequest(key=f"{sid}/{turn}", session=sid, turn=turn, phase=phase, messages=tuple(msgs),
                             expect=Expectation.exact(expected))

    phases = []
    for t in range(spec.turns):
        phases.append((f"turn-{t}", tuple(request(f"s{s}", t, f"turn-{t}") for s in range(spec.sessions))))
    for k in range(spec.agent_switches):
        sid = f"s{spec.sessions + k}"
        # An agent switch: a fresh session on a warm shared prefix, after the others.
        phases.append((f"switch-{k}", (request(sid, 0, f"switch-{k}"),)))
    return Workload(name=spec.name, phases=tuple(phases), max_tokens=spec.max_tokens, top_logprobs=spec.top_logprobs,
                    api=spec.api, probes=tuple(probes), block_tokens=spec.probe_block_tokens)


def _request_content(r: ReplayRequest) -> dict[str, object]:
    content = asdict(r)
    # Only when present: requests without an expectation keep the digests (and cell ids)
    # they had before expectations existed; likewise shapes and claims.
    for name in ("expect", "shape", "claim", "repeat"):
        content.pop(name)
    if r.expect is not None:
        content["expect"] = r.expect.to_json()
    if r.shape:
        content["shape"], content["claim"] = r.shape, asdict(r.claim) if r.claim else None
    if r.repeat:
        content["repeat"] = r.repeat
    return content


def requests_digest(wl: Workload) -> str:
    """The requests as laid out: what a run of a shaped workload records it replayed."""
    return hashlib.sha256(json.dumps([[name, [_request_content(r) for r in reqs]] for name, reqs in wl.phases],
                                     sort_keys=True).encode()).hexdigest()


def workload_digest(spec: WorkloadParams) -> str:
    """What a cell id holds of its workload. A shaped workload's requests depend on the
    engine's block, known only once it runs, so its digest is the spec's; the requests a
    run replayed are recorded with it (:func:`requests_digest`)."""
    if spec.shapes is not None:
        content: dict[str, object] = {"shaped": spec.model_dump(mode="json")}
        if LAYOUT_VERSION > 1:  # the first layout's cells keep the ids they were recorded under
            content["layout_version"] = LAYOUT_VERSION
        payload = json.dumps(content, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()
    wl = build_workload(spec)
    content: dict[str, object] = {
        "phases": [[name, [_request_content(r) for r in reqs]] for name, reqs in wl.phases],
        "max_tokens": wl.max_tokens, "top_logprobs": wl.top_logprobs,
    }
    if wl.restart_after:
        # Only when present: workloads without restarts keep the digests (and cell ids)
        # they had before replays executed restart points.
        content["restart_after"] = list(wl.restart_after)
    if wl.api != "chat":
        # Likewise: chat workloads keep the digests they had before the API was a choice.
        content["api"] = wl.api
    payload = json.dumps(content, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()
