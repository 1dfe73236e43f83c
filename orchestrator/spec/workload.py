"""What a cell replays and how it is graded: the workload's shapes (laid out on the
engine's block by jobs/shapes.py), its sessions and turns, and the grading settings."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_serializer,
    model_validator,
)

from vmatrix.orchestrator.spec.knobs import Strict
from vmatrix.workload import Api

if TYPE_CHECKING:
    from vmatrix.cells import Cell


class _Shape(Strict):
    name: str = ""  # unique within a workload; unset: the kind
    # The shape laid out again this many times, on fresh prompts: a race that turns one
    # request in 64 wrong shows in some runs only; the evidence counts per repeat.
    repeat: int = Field(default=1, ge=1, le=64)
    # Also lay out requests for the restore point a speculative engine reaches, a block
    # lower than prefix caching alone (EAGLE/MTP/DFlash drop the last matching block), so
    # that its hits are asked what the restored state carries (jobs/shapes.py). Off: the
    # requests of a matrix without speculative cells, and fewer of them.
    block_drop: bool = True
    # Each of its phases held at the engine's scheduler (vLLM's pause, mode keep) until all
    # its requests are queued, in order, then released (jobs/replay.py): a race's chunk
    # layout is then the same every run, not whatever order and timing the requests reached
    # the engine in. Needs an engine that serves /pause (vLLM 0.27.1+ on the CPU).
    gate: bool = False

    @model_serializer(mode="wrap")
    def _gate_only_when_on(self, handler: Any) -> Any:
        # Cells recorded before the gate existed keep their ids: the spec's dump (and so
        # the workload digest) names `gate` only where it is on.
        data = handler(self)
        if not self.gate and isinstance(data, dict):
            data.pop("gate", None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("name") and isinstance(data.get("kind"), str):
            return {**data, "name": data["kind"]}
        return data


class ColdRace(_Shape):
    """Cold prompts of ``blocks`` Mamba blocks sent at once, then again with a question
    (vLLM issue 43559); fragmenting them needs a token budget below their sum."""

    kind: Literal["cold_race"]
    prompts: int = Field(default=16, ge=1)
    blocks: tuple[float, float] = (1.05, 1.95)
    identical: bool = False

    @field_validator("blocks")
    @classmethod
    def _inside_two_blocks(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 1 < v[0] <= v[1] < 2:
            raise ValueError("prompt lengths must lie between 1 and 2 blocks (1 < low <= high < 2)")
        return v


class DecodeCross(_Shape):
    """Prompts ``short_by`` tokens short of two blocks, whose decode crosses the boundary,
    then again with a question about the block before it."""

    kind: Literal["decode_cross"]
    prompts: int = Field(default=16, ge=1)
    # The answer ("var_XXXX =" and 6 words: 13 tokens, then its end token) must cross it.
    short_by: tuple[int, int] = (6, 13)

    @field_validator("short_by")
    @classmethod
    def _answer_crosses(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= v[0] <= v[1] <= 13:
            raise ValueError("the answer's 13 tokens must cross the boundary: 1 <= low <= high <= 13")
        return v


class SpecTail(_Shape):
    """Prompts ``m`` blocks + ``t`` tokens long, sent twice: the second's last prefill chunk
    is ``t`` = 1 + k tokens past a restored boundary (vLLM issue 55766)."""

    kind: Literal["spec_tail"]
    blocks: tuple[int, ...] = Field(default=(1, 2), min_length=1)
    tails: tuple[int, ...] = Field(default=(2, 3, 4), min_length=1)

    @field_validator("blocks", "tails")
    @classmethod
    def _positive(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if min(v) < 1:
            raise ValueError("must be >= 1")
        return v


class AgentShape(_Shape):
    """Sessions of turns over a long shared prefix, then agent switches onto it."""

    kind: Literal["agent"]
    prefix_tokens: int = Field(default=1500, ge=64)
    sessions: int = Field(default=3, ge=1)
    turns: int = Field(default=3, ge=1)
    agent_switches: int = Field(default=1, ge=0)


class UniqueTail(_Shape):
    """A shared prefix ending mid-block, then a tail of each request's own longer than a
    block, in two waves (vLLM issue 45238)."""

    kind: Literal["unique_tail"]
    requests: int = Field(default=4, ge=1)
    shared_blocks: float = Field(default=2.5, gt=1)
    tail_blocks: float = Field(default=1.5, gt=1)


Shape = Annotated[ColdRace | DecodeCross | SpecTail | AgentShape | UniqueTail, Field(discriminator="kind")]


class WorkloadSpec(Strict):
    """A synthetic shared-prefix agent workload (see jobs/workload.py)."""

    name: str = "shared-prefix"
    kind: Literal["shared_prefix", "trace"] = "shared_prefix"
    trace: str | None = None  # kind: trace: a JSONL trace (docs/traces.md), relative to the matrix file
    seed: int = 0
    prefix_tokens: int = Field(default=1500, ge=16)
    sessions: int = Field(default=3, ge=1)
    turns: int = Field(default=3, ge=1)
    agent_switches: int = Field(default=1, ge=0)
    max_tokens: int = Field(default=24, ge=1)
    top_logprobs: int = Field(default=2, ge=2, le=20)
    # The engine's prefix-cache block size in tokens (vLLM logs it at startup): the shared
    # prefix is laid out so that its last cached block ends right after a definition's
    # name, and each session's first cache-hitting request (turn 1, an agent switch) asks
    # for that definition, whose words are read through the restored state: a wrong
    # carried state changes the answer (docs/GRADING.md, "Sensitivity").
    probe_block_tokens: int | None = Field(default=None, ge=16)
    # chat: /v1/chat/completions; completions: the engine's /tokenize renders the same
    # messages with its chat template and the ids go to /v1/completions (jobs/replay.py).
    api: Api = "chat"
    # Requests laid out on the engine's Mamba block (jobs/shapes.py), learned from the engine
    # when it starts, or probe_block_tokens when given; None: the unshaped workload above.
    shapes: tuple[Shape, ...] | None = None

    @model_validator(mode="after")
    def _shapes_alone(self) -> WorkloadSpec:
        if self.shapes is None:
            return self
        if self.kind == "trace":
            raise ValueError("shapes: a trace's prompts are its own; shapes lay out canary prompts")
        if not self.shapes:
            raise ValueError("shapes: an empty list sends nothing; leave `shapes` out")
        # Not model_fields_set: a stored cell's workload is the whole dump, defaults included.
        unshaped = {f for f in ("prefix_tokens", "sessions", "turns", "agent_switches")
                    if getattr(self, f) != type(self).model_fields[f].default}
        if unshaped:
            raise ValueError(f"{min(unshaped)}: with `shapes:` the agent shape has it "
                             "(`- {kind: agent, prefix_tokens: ...}`)")
        names = [s.name for s in self.shapes]
        if len(set(names)) != len(names):
            raise ValueError(f"shapes: two shapes are named {next(n for n in names if names.count(n) > 1)!r}; "
                             "give them `name:`s")
        return self

    @model_validator(mode="after")
    def _trace_iff_kind(self) -> WorkloadSpec:
        if (self.kind == "trace") != (self.trace is not None):
            raise ValueError("`trace: FILE` goes with `kind: trace`, and only with it")
        return self

    @model_validator(mode="after")
    def _probe_fits(self) -> WorkloadSpec:
        from vmatrix.jobs.workload import probe_fits, probe_problem

        if self.probe_block_tokens is None or self.shapes is not None:
            return self
        if self.kind == "trace":
            raise ValueError("probe_block_tokens: a trace's prompts are its own; probing lays out canary prompts")
        if not probe_fits(self.seed, self.prefix_tokens, self.probe_block_tokens):
            raise ValueError(probe_problem(self.prefix_tokens, self.probe_block_tokens))
        return self


class Grading(Strict):
    """Thresholds calibrated on the CPU engine (docs/GRADING.md).

    A divergence where the control's top-1 and top-2 logprobs were this close is a
    tie flip: logits are bf16, whose values are 2 ** (floor(log2 |x|) - 7) apart (1/32
    between 4 and 8, 1/16 between 8 and 16), so two tokens one rounding step apart are
    a tie that batch shape can flip. The margin is ``max(tie_margin, tie_steps x one bf16
    step at logit_scale)``: the step at the model's largest top-1 logits, where a
    confident model's choices are made; ``logit_scale`` None takes the model's recorded
    one (a canary's build records it; other models have none, and then ``tie_margin``
    alone applies). A measured noise floor raises it further (``calibrate``). One tie
    flip is noise; many are not: a stack whose requests flip at near-ties more often
    than this fraction is corrupt even if no single flip is clear.
    """

    tie_margin: float = Field(default=0.04, ge=0)
    tie_steps: float = Field(default=2, ge=0)
    logit_scale: float | None = Field(default=None, gt=0)
    max_tie_flip_fraction: float = Field(default=0.25, ge=0, le=1)
    # Run each control twice and store the measured noise floor with the sweep; the
    # grader then uses the larger of tie_margin and the largest margin the repeat
    # flipped at, and reports drift beyond the measured envelope.
    calibrate: bool = False
    # Stop sending a cell's requests after this many confident divergences from its
    # control (None: never). Cells then wait for their control to finish.
    abort_after: int | None = Field(default=None, ge=1)
    # Symptom kinds (jobs/symptoms.py KINDS) reported but never held against a cell.
    ignore_symptoms: tuple[str, ...] = ()

    @field_validator("ignore_symptoms")
    @classmethod
    def _known_symptoms(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        from vmatrix.jobs.symptoms import KINDS

        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown symptom '{unknown[0]}' (known: {', '.join(KINDS)})")
        return kinds


def workload_spec(cell: Cell) -> WorkloadSpec:
    """The workload spec a cell carries (as a dict: it travels to Ray tasks and into the
    store), validated once per process for each workload: the run, the grade and the views
    read the same value, and build its requests with ``jobs.workload.build_workload``."""
    return _spec_of(json.dumps(cell.workload, sort_keys=True))


@lru_cache(maxsize=256)
def _spec_of(workload_json: str) -> WorkloadSpec:
    return WorkloadSpec(**json.loads(workload_json))
