"""Grade a cell's replay against its control's, request by request, then the cell.

Generated token ids are compared exactly. At the first divergent token the
control's logprob margin (top-1 minus top-2) decides what the divergence means: at
a near-tie (margin <= the tie margin) greedy decoding may flip with batch shape, so
the request is a ``tie-flip``, not evidence against the stack; at a clear margin the
cell's state produced a different distribution, and the request is ``divergent``.
When the model's end-of-turn tokens are known, the tokens compared are the control's
answer, up to and including its end token: the replay generates past it, and that text
is neither what a user receives nor what the model was trained to write.

Cell verdicts (docs/GRADING.md has the reasons and the measurements):

- ``corrupt``: a request diverges at a clear margin, a request that was sent got no
  answer, or more than ``max_tie_flip_fraction`` of the requests tie-flip while
  logprobs drift beyond the envelope; or the cell answers fewer requests right than
  its control, beyond noise (:func:`recall`: ground truth, where the workload knows it).
- ``unexercised``: none of that, but what the cell claims to test did not happen
  (:func:`coverage`: prefix caching without a hit, speculative decoding without a
  draft, LMCache without a retrieval, a restart point not executed).
- ``degraded``: none of that, but too many tie flips without drift, or a symptom
  (jobs/symptoms.py) the control does not show. Draft acceptance stuck near 0% is not
  one: it is about speed, in the evidence's ``speed`` beside the verdict (vmatrix/speed.py).
- ``clean``: otherwise. Logprob and margin drift on agreeing tokens are reported in the
  evidence (and drift beyond its envelope in the summary), not graded on their own:
  healthy GPU paths drift past any envelope a control repeat can measure.

The tie margin is the configured one, raised to ``tie_steps`` bf16 steps at the model's
logit scale when that is known (:func:`scaled_tie_margin`: logits are rounded to bf16,
whose resolution grows with their magnitude), then to the noise floor's largest flip
margin when a control-vs-control repeat measured a larger one (:func:`noise_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from vmatrix.jobs import symptoms
from vmatrix.jobs.divergence import RequestGrade, compare
from vmatrix.jobs.noise import NoiseFloor, bf16_step, effective_tie_margin, scaled_tie_margin
from vmatrix.jobs.shape_grade import Shaped, repeat_counts, repeats_line, shape_coverage, shape_findings, shape_recall
from vmatrix.records import Transcript

# Drift on tokens both runs agree on, beyond this multiple of the noise floor (its
# measured drift, or the tie margin at one bf16 step of the logit scale when the repeat
# was bit-exact or not measured), is more than rounding. Noise and changed arithmetic are one bf16 step (0.031 on the
# CPU engine, 0.034 on the H200s, docs/GPU.md); the positive control drifted 0.077-
# 0.079: 1.5 x max(0.031, 0.04) = 0.06 separates them. The envelope only decides between
# flips with drift (corrupt) and flips without (degraded): drift alone grades nothing.
# On an H200 healthy cells of vLLM 0.25.1 drifted 0.211 (prefix caching, the same token in
# three runs, a near-tie) and 0.267 (MTP, no cache) against a control bit-exact with
# itself, so no floor a control repeat measures covers a changed GPU path; and in no
# recorded run did drift alone catch a fault the answers missed (docs/GRADING.md).
DRIFT_ENVELOPE = 1.5
# A cell recalls worse than its control when the one-sided exact McNemar test says so at
# this level: with no request the other way, 5 the control got right and the cell wrong
# (p = 1/32), not 4 (p = 1/16). As vLLM's own hybrid prefix-cache test
# (tests/v1/e2e/test_hybrid_mamba_prefix_cache_correctness.py): needle recall against an
# APC-off control, failing only on more flips than a margin allows.
RECALL_ALPHA = 0.05


# --- ground truth: how many answers are right, in the cell and in its control -------------


def mcnemar_p(b: int, c: int) -> float:
    """One-sided exact McNemar test: P(X >= b) for X ~ Binomial(b + c, 1/2), the chance of
    at least ``b`` of the ``b + c`` discordant requests going the cell's way by noise alone."""
    n = b + c
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(b, n + 1)) / 2**n


@dataclass(frozen=True)
class Recall:
    """Task accuracy of a cell and of its control, over the requests with an expectation
    that both answered."""

    requests: int
    cell: int  # right in the cell
    control: int  # right in the control
    b: int  # right in the control, wrong in the cell
    c: int  # wrong in the control, right in the cell
    p: float  # mcnemar_p(b, c)
    regressions: tuple[dict[str, Any], ...]  # the b requests: key, session, turn, expected, both answers

    @property
    def worse(self) -> bool:
        """The cell recalls worse than its control beyond noise (equal or better never is)."""
        return self.p < RECALL_ALPHA

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"regressions": list(self.regressions), "alpha": RECALL_ALPHA}


def recall(cell: Transcript, control: Transcript) -> Recall:
    """Grade every answer with an expectation against it (:mod:`vmatrix.expect`), in both runs.

    Requests not answered in both (failed, or not sent) are left out: a failed request
    is ``missing`` already, a skipped one was never asked.
    """
    mine = cell.by_key()
    n = right_cell = right_control = 0
    regressions: list[dict[str, Any]] = []
    c = 0
    for ref in control.requests:
        got = mine.get(ref.key)
        if ref.expect is None or ref.error or got is None or got.error:
            continue
        n += 1
        ok_control, ok_cell = ref.expect.matches(ref.answer), ref.expect.matches(got.answer)
        right_control += ok_control
        right_cell += ok_cell
        c += ok_cell and not ok_control
        if ok_control and not ok_cell:
            regressions.append({
                "key": ref.key, "session": ref.session, "turn": ref.turn, "expected": ref.expect.to_json(),
                # The answer, or the whole text when the model did not finish one.
                "cell_text": got.answer if got.answer is not None else got.text, "cell_finished": got.answer is not None,
                "control_text": ref.answer,
            })
    b = len(regressions)
    return Recall(n, right_cell, right_control, b, c, mcnemar_p(b, c), tuple(regressions))


# --- coverage: did what the cell claims to test happen? -------------------------------------

# Counter names as the replay stores them (jobs/metrics.py: per-phase /metrics deltas,
# engine and model labels folded away).
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
# vLLM's counters of the KV connector (LMCache): tokens asked of it and tokens it served.
# What LMCache stored is not among vLLM's counters (LMCache's own, `lmcache:*`, are
# LMCache's to serve and the replay does not scrape them), so the check is on what it
# retrieved: a cell whose LMCache never served a token did not put it in any answer.
CONNECTOR_HITS = "vllm:external_prefix_cache_hits_total"
CONNECTOR_QUERIES = "vllm:external_prefix_cache_queries_total"


@dataclass(frozen=True)
class Exercised:
    """What a cell claims to test, from its knobs and its workload (the scheduler builds
    it; the grader does not read the orchestrator's types)."""

    prefix_caching: bool = False
    speculative: bool = False
    lmcache: bool = False  # a KV connector is set
    restart_points: tuple[str, ...] = ()  # jobs.workload.Workload.restart_points, in order
    # The block size a probing workload laid its prompts out for (WorkloadSpec.probe_block_tokens).
    probe_block_tokens: int | None = None


def _total(metrics: dict[str, dict[str, float]], name: str) -> float:
    # jobs.metrics.total, without importing the scraper (aiohttp, prometheus_client) here.
    return sum(phase.get(name, 0.0) for phase in metrics.values())


def coverage(cell: Transcript, exercised: Exercised, requests: int, block_tokens: int | None = None) -> dict[str, Any]:
    """The gaps between what a cell claims and what its run did, from the counters summed
    over phases, the requests' restart counts and ``block_tokens``, the prefix-cache block
    the engine chose (its log; None: not known).

    A counter the run did not measure (no phase's /metrics was scraped, or the engine
    exports no such counter) is listed as unmeasured, never as a gap: an unknown is not
    evidence that nothing happened.
    """
    names = (PREFIX_HITS, PREFIX_QUERIES, SPEC_DRAFT_TOKENS, CONNECTOR_HITS, CONNECTOR_QUERIES)
    counters = {name: _total(cell.metrics, name) for name in names}
    scraped = bool(cell.metrics)  # a phase is recorded only when /metrics answered before and after it
    gaps: list[str] = []
    unmeasured: list[str] = []
    if exercised.prefix_caching and requests > 1:  # one request has no shared prefix to hit
        if not scraped:
            unmeasured.append("prefix caching: /metrics not scraped")
        elif counters[PREFIX_HITS] == 0:
            gaps.append(f"prefix caching on, but no prefix-cache hit in {requests} requests "
                        f"({counters[PREFIX_QUERIES]:.0f} tokens queried)")
    if exercised.speculative:
        if not scraped:
            unmeasured.append("speculative decoding: /metrics not scraped")
        elif counters[SPEC_DRAFT_TOKENS] == 0:
            gaps.append("speculative decoding on, but no token drafted")
    if exercised.lmcache:
        if not scraped or counters[CONNECTOR_QUERIES] == 0:
            # vLLM counts connector queries for every request when it has the counters.
            unmeasured.append("LMCache: no KV connector counters (vllm:external_prefix_cache_*) recorded")
        elif counters[CONNECTOR_HITS] == 0:
            gaps.append(f"LMCache on, but no token retrieved through it ({counters[CONNECTOR_QUERIES]:.0f} tokens "
                        f"asked)")
    probe = exercised.probe_block_tokens
    if exercised.prefix_caching and probe is not None:
        # A probe laid out for other blocks asks lines no restore point splits: every answer
        # comes from cached keys, and the cell would match its control untested.
        if block_tokens is None:
            unmeasured.append(f"probe for {probe}-token blocks: the engine's block size is not in its log")
        elif block_tokens != probe:
            gaps.append(f"the workload probes {probe}-token blocks, but the engine caches blocks of {block_tokens}")
    done = max((r.restarts for r in cell.requests), default=0)
    gaps += [f"restart after {point} not executed" for n, point in enumerate(exercised.restart_points, 1) if done < n]
    return {"exercised": asdict(exercised), "counters": counters, "gaps": gaps, "unmeasured": unmeasured}


# --- the noise floor: the control against itself -------------------------------------------


# --- the cell ----------------------------------------------------------------------------------


def _headline(g: RequestGrade, reason: str) -> dict[str, Any]:
    """The evidence a non-clean verdict leads with: where, and both continuations."""
    return {"reason": reason, "key": g.key, "session": g.session, "turn": g.turn,
            "token_index": g.index if g.index is not None else g.drift_index,
            "control_margin": g.control_margin, "cell_tokens": list(g.cell_tokens),
            "control_tokens": list(g.control_tokens), "cell_text": g.cell_text, "control_text": g.control_text}


def _where(g: RequestGrade) -> str:
    return f"session {g.session} turn {g.turn}" + (f" token {g.index}" if g.index is not None else "")


def grade_transcripts(
    cell: Transcript,
    control: Transcript,
    tie_margin: float = 0.0,
    max_tie_flip_fraction: float = 1.0,
    floor: NoiseFloor | None = None,
    ignore_symptoms: Iterable[str] = (),
    exercised: Exercised | None = None,
    tie_steps: float = 2.0,
    logit_scale: float | None = None,
    end_tokens: frozenset[int] = frozenset(),
    block_tokens: int | None = None,
    shaped: Shaped | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """Return (verdict, one-line summary, evidence) for two completed replays.

    ``end_tokens``: the model's end-of-turn ids; token rules then grade each control's
    answer, up to its end token, not the text generated past it (:func:`compare`).
    ``block_tokens``: the engine's prefix-cache block, checked against a probing workload's.

    ``shaped``: a shaped workload's requests as laid out: recall and coverage per shape
    (jobs/shape_grade.py). The cell and its control must have been laid out alike.

    ``exercised``: what the cell claims to test, checked against its run (:func:`coverage`);
    None: not checked (evidence ``coverage`` is None). ``tie_steps`` and ``logit_scale``:
    the tie margin's floor in bf16 steps at the model's logit scale (:func:`scaled_tie_margin`;
    no scale, no such floor).
    """
    scaled = scaled_tie_margin(tie_margin, tie_steps, logit_scale)
    margin = effective_tie_margin(scaled, floor)
    mine = cell.by_key()
    not_sent = set(cell.skipped)
    grades = [
        RequestGrade(r.key, "skipped", r.session, r.turn) if r.key in not_sent and r.key not in mine
        else compare(mine.get(r.key), r, margin, end_tokens)
        for r in control.requests
    ]
    sent = [g for g in grades if g.verdict != "skipped"]
    ties = [g for g in sent if g.verdict == "tie-flip"]
    bad = [g for g in sent if g.verdict in ("divergent", "missing")]
    identical = len(sent) - len(ties) - len(bad)
    found = symptoms.blamed(symptoms.transcript_symptoms(cell), symptoms.transcript_symptoms(control),
                            ignore_symptoms)
    truth = recall(cell, control)
    # Without a measured floor the tie margin stands in for it: it is only used to tell
    # many flips with drifted numerics (corrupt) from many flips without (degraded). One
    # bf16 step at the logit scale, not ``tie_steps`` of them: a logprob both runs agree on
    # is off by at most about one rounding of its logits (healthy drift on the CPU engine
    # 0.025-0.031, a third to a half of a step at scale 12), whereas a tie is two logits
    # rounded each its own way. With the steps the envelope of the e2e sweep was 0.188 and
    # its positive control (drift 0.200) passed it by a hair; with one step it was 0.094
    # (the canary of logit scale 12.3; the recalling canary's 27.4 makes it 0.19).
    envelope = DRIFT_ENVELOPE * max(floor.max_drift if floor else 0.0,
                                    effective_tie_margin(scaled_tie_margin(tie_margin, 1.0, logit_scale), floor))
    drifted = max(sent, key=lambda g: g.drift, default=None)
    beyond = drifted is not None and drifted.drift > envelope
    # How far the top-1/top-2 margins of agreeing tokens moved: evidence, not a rule. A carried
    # state scaled by 0.5 moved them 0.94 on the CPU engine with every answer right, healthy
    # cells there 0.16-0.31; but healthy cells on an H200 moved them 0.44-0.81 (chunked GDN
    # prefill and MTP verification change the arithmetic; docs/GPU.md), so no envelope tells
    # a mildly wrong state from a healthy path on every engine (docs/GRADING.md, Sensitivity).
    shifted = max(sent, key=lambda g: g.margin_drift, default=None)
    evidence: dict[str, Any] = {
        "requests": len(sent),
        "identical": identical,
        # Token rules on the answers (up to the control's end-of-turn token) or on all tokens.
        "graded": "answers" if end_tokens else "outputs",
        "max_drift": max((g.drift for g in sent), default=0.0),
        "max_margin_drift": shifted.margin_drift if shifted else 0.0,
        "max_margin_drift_at": (f"session {shifted.session} turn {shifted.turn} token {shifted.margin_drift_index}"
                                if shifted and shifted.margin_drift > 0 else None),
        "tie_margin": margin,
        "tie_margin_configured": tie_margin,
        "tie_steps": tie_steps,
        "logit_scale": logit_scale,
        "tie_margin_bf16": tie_steps * bf16_step(logit_scale) if logit_scale is not None else None,
        "noise_floor": floor.to_json() if floor else None,
        "drift_envelope": envelope,
        "drift_calibrated": floor is not None,
        "tie_flips": [g.to_json() for g in ties],
        "divergent": [g.to_json() for g in bad],
        "skipped": [g.key for g in grades if g.verdict == "skipped"],
        "aborted_early": cell.aborted_early,
        "symptoms": {"blamed": [s.to_json() for s in found.blamed], "excused": [s.to_json() for s in found.excused],
                     "control_kinds": found.control_kinds},
        "recall": truth.to_json(),
        "coverage": coverage(cell, exercised, len(sent), block_tokens) if exercised is not None else None,
        # About speed, not answers: shown beside the verdict, never graded (vmatrix/speed.py).
        "speed": [s.to_json() for s in symptoms.speed_findings(cell)],
    }
    findings = []
    repeated = ""
    if shaped is not None:
        per_shape = shape_recall(cell, control, shaped.placed, shaped.block)
        findings = shape_findings(per_shape)
        wrong = {g.key for g in bad} | {k for s in per_shape.values() for k in s["flips"]}
        if counts := repeat_counts(shaped.placed, wrong):
            evidence["repeats"] = counts
            repeated = f"; repeats: {repeats_line(counts)}"
        covered, gaps, unmeasured = shape_coverage(
            cell, shaped.placed, prefix_caching=bool(exercised and exercised.prefix_caching), block=shaped.block,
            draft_tokens=shaped.draft_tokens if exercised is None or exercised.speculative else None,
            fragments=shaped.fragments)
        evidence["shapes"] = {name: {**per_shape.get(name, {}), "coverage": covered[name]} for name in covered}
        if evidence["coverage"] is not None:
            evidence["coverage"]["gaps"] += gaps
            evidence["coverage"]["unmeasured"] += unmeasured
    skipped = f"; aborted early, {len(evidence['skipped'])} request(s) not sent" if cell.aborted_early else ""
    why = [f"{tie_steps:g} bf16 steps at logit scale {logit_scale:g}"] if scaled != tie_margin else []
    why += [f"calibrated from {scaled:g}"] if margin != scaled else []
    calibrated = f" ({'; '.join(why)})" if why else ""

    if bad:
        first = bad[0]
        evidence["first"] = _headline(first, first.verdict)
        at = f", control margin {first.control_margin:.2f}" if first.control_margin is not None else ""
        what = "got no answer" if first.verdict == "missing" else "differ at a clear margin"
        return "corrupt", f"{len(bad)}/{len(sent)} requests {what}; first at {_where(first)}{at}{repeated}{skipped}", evidence
    many_flips = len(ties) > max_tie_flip_fraction * len(sent)
    if many_flips and beyond:
        # Each flip alone is a near-tie, but noise does not flip this many requests, and
        # the tokens both runs agree on drifted beyond rounding: the state differs.
        evidence["first"] = _headline(ties[0], "tie-flips")
        return "corrupt", (f"{len(ties)}/{len(sent)} requests flip at near-ties (noise allows "
                           f"{max_tie_flip_fraction:.0%}) and logprobs drift {drifted.drift:.3f} (envelope "
                           f"{envelope:.3f}); first at {_where(ties[0])}"), evidence
    if findings:
        first_finding = findings[0]
        g = next(g for g in grades if g.key == first_finding.keys[0])
        wrong = next((w for w in truth.regressions if w["key"] == g.key), {})
        evidence["first"] = _headline(g, f"shape {first_finding.reason}") | {"shape": first_finding.shape} | {
            k: wrong[k] for k in ("expected", "cell_text", "control_text", "cell_finished") if k in wrong}
        more = f" (and {len(findings) - 1} more shape(s))" if len(findings) > 1 else ""
        return "corrupt", first_finding.summary + more + repeated, evidence
    if truth.worse:
        wrong = truth.regressions[0]
        g = next(g for g in grades if g.key == wrong["key"])
        evidence["first"] = _headline(g, "recall") | {
            k: wrong[k] for k in ("expected", "cell_text", "control_text", "cell_finished")}
        return "corrupt", (f"recall {truth.cell}/{truth.requests} against the control's {truth.control}/"
                           f"{truth.requests}: {truth.b} answer(s) right in the control are wrong in the cell, "
                           f"{truth.c} the other way (p = {truth.p:.3g}); first at session {g.session} turn {g.turn}"
                           f"{repeated}"), evidence
    if evidence["coverage"] and evidence["coverage"]["gaps"]:
        # Matched its control, but what it claims to test did not happen: not evidence of health.
        gaps = evidence["coverage"]["gaps"]
        evidence["first"] = {"reason": "unexercised", "gap": gaps[0]}
        return "unexercised", f"not exercised: {'; '.join(gaps)}", evidence
    if found.blamed:
        s = found.blamed[0]
        g = next((g for g in grades if g.key == s.key), None)
        found_json = {k: v for k, v in s.to_json().items() if v is not None}
        evidence["first"] = (_headline(g, s.kind) if g else {"reason": s.kind}) | found_json
        place = f" at session {s.session} turn {s.turn}" if s.key else ""
        kinds = sorted({x.kind for x in found.blamed})
        return "degraded", (f"symptom(s) the control does not show: {', '.join(kinds)}; first{place}: "
                            f"{s.detail}"), evidence
    if many_flips:
        # Not bit-identical beyond noise, but no token at a clear margin and no drift:
        # changed arithmetic (chunked prefill, verification batches), not shown wrong.
        evidence["first"] = _headline(ties[0], "tie-flips")
        return "degraded", (f"{len(ties)}/{len(sent)} requests flip at near-ties (noise allows "
                            f"{max_tie_flip_fraction:.0%}), drift {drifted.drift:.3f} within {envelope:.3f}, "
                            f"no confident divergence; first at {_where(ties[0])}"), evidence
    if beyond:
        evidence["max_drift_at"] = f"session {drifted.session} turn {drifted.turn} token {drifted.drift_index}"
    flips = f", {len(ties)} tie flip(s) at margin <= {margin:.3g}{calibrated}" if ties else ""
    right = (f"; recall {truth.cell}/{truth.requests} (control {truth.control}/{truth.requests})"
             if truth.requests else "")
    moved = (f"; logprob drift {drifted.drift:.3f} beyond {envelope:.3f} at {evidence['max_drift_at']} (evidence, "
             f"not graded)" if beyond else "")
    matched = f"{identical}/{len(sent)} requests identical to control{flips}{right}{moved}{repeated}{skipped}"
    if unmeasured := (evidence["coverage"] or {}).get("unmeasured"):
        # Right as far as it was asked, but part of what the cell claims was not measured
        # (say, no asked line inside the block its hit restored): not a bare clean.
        evidence["first"] = {"reason": "partial", "unmeasured": unmeasured[0]}
        return "partial", f"{matched}; not measured: {'; '.join(unmeasured)}", evidence
    return "clean", matched, evidence


