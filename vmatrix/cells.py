"""Internal values for one matrix cell and the outcome of running it.

A :class:`Cell` is fully resolved: every input that can change its outcome is in it
(engine recipe with patch digest, knobs, model digest, workload digest), and its id
is a hash of exactly those, so the same cell in two sweeps is the same row.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from vmatrix.recipe import EngineRecipe

if TYPE_CHECKING:  # a type here only: read-only commands need the names, not the records (issue 42)
    from vmatrix.records import Transcript

__all__ = ["LEGACY_VERDICTS", "RANK", "STATUSES", "VERDICTS", "Cell", "Direction", "Grade", "ModelRef", "RunOutcome", "digest", "direction"]

# invalid: the knobs break a geometry rule (orchestrator/stack/geometry.py); no engine was started.
# task_failed: the cell's Ray task died around the engine (its worker or node lost past Ray's
# retries, vmatrix not importable on the worker, a bug in vmatrix): it says nothing about
# the stack, so it is never graded as the engine's crash, and `sweep run` runs it again.
Status = Literal["ok", "startup_failed", "crashed", "timeout", "invalid", "task_failed"]
# Stored grades may still say "divergent", the old name of "corrupt"; they read back as
# "corrupt" (db.models.VerdictName).
# partial: answers matched the control, but part of what the cell claims was not measured
# (its coverage has an `unmeasured` item: say, no asked line inside a restored block), so
# it is not shown as a bare clean.
Verdict = Literal["clean", "partial", "degraded", "unexercised", "corrupt", "crashed", "startup_failed", "timeout", "invalid",
                  "ungraded", "control", "task_failed"]
# The same names as values, for code that checks or lists them (one vocabulary).
STATUSES: tuple[str, ...] = get_args(Status)
VERDICTS: tuple[str, ...] = get_args(Verdict)
# Verdicts renamed since; stored rows keep the old name (grades are append-only), and
# every read of a stored verdict maps it (db.models' VerdictName, db.reads' raw SQL,
# the bisect's predicates).
LEGACY_VERDICTS: dict[str, str] = {"divergent": "corrupt"}

# How good a result is, for which way it changed between two releases: answers right,
# then right with part of the claim unmeasured, then right but not exercised, then
# symptoms, then wrong answers, then no answers at all. `invalid` (the knobs break a
# geometry rule), `ungraded` (the control did not run) and `task_failed` (vmatrix's task
# died, not the engine) say nothing about the release, and are not ranked.
RANK: dict[str, int] = {"control": 0, "clean": 0, "partial": 1, "unexercised": 2, "degraded": 3, "corrupt": 4,
                        "crashed": 5, "startup_failed": 5, "timeout": 5}
Direction = Literal["better", "worse", "changed"]


def direction(before: str, after: str) -> Direction | None:
    """Which way a result changed; None when the two cannot be ranked against each other."""
    if before not in RANK or after not in RANK:
        return None
    return "better" if RANK[after] < RANK[before] else "worse" if RANK[after] > RANK[before] else "changed"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def digest(value: Any) -> str:
    import hashlib  # ~3 ms to import (OpenSSL); only ids and digests need it

    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


@dataclass(frozen=True)
class ModelRef:
    path: str
    digest: str
    name: str  # "canary:<name>" or the path's basename


def model_end_tokens(model_dir: str | Path) -> frozenset[int]:
    """The token ids that end a turn for the model in ``model_dir``: ``eos_token_id`` of its
    ``generation_config.json`` (what vLLM stops at), else of its ``config.json``; empty
    when neither names one (or the folder cannot be read). Here, beside the model's
    reference, so the grader reads them without importing the replay's HTTP client."""
    for name in ("generation_config.json", "config.json"):
        try:
            eos = json.loads((Path(model_dir) / name).read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        ids = eos if isinstance(eos, list) else [eos]
        found = frozenset(i for i in ids if isinstance(i, int) and not isinstance(i, bool))
        if found:
            return found
    return frozenset()


@dataclass(frozen=True)
class Cell:
    id: str
    engine: EngineRecipe
    knobs: dict[str, Any]
    model: ModelRef
    workload: dict[str, Any]  # the workload spec, resolved
    workload_digest: str
    control_id: str | None  # None: this cell is a control
    resources: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def make_id(engine: EngineRecipe, knobs: dict[str, Any], model_digest: str, workload_digest: str) -> str:
        return digest(
            {"engine": engine.identity(), "knobs": knobs, "model": model_digest, "workload": workload_digest}
        )[:16]

    @property
    def is_control(self) -> bool:
        return self.control_id is None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cell:
        """The cell :meth:`to_json` stored, as it was recorded."""
        return cls(data["id"], EngineRecipe(**data["engine"]), data["knobs"], ModelRef(**data["model"]),
                   data["workload"], data["workload_digest"], data["control_id"], data.get("resources") or {})

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "engine": self.engine.identity(),
            "knobs": self.knobs,
            "model": asdict(self.model),
            "workload": self.workload,
            "workload_digest": self.workload_digest,
            "control_id": self.control_id,
            "resources": self.resources,
        }


@dataclass
class RunOutcome:
    """What running one cell produced, before grading."""

    cell_id: str
    status: Status
    started_at: float
    finished_at: float
    signature: str | None = None  # decisive error line, normalised
    message: str | None = None  # human detail (e.g. which patch failed)
    transcript: Transcript | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # env_s, startup_s, replay_s, total_s
    log_path: str | None = None
    node: str | None = None
    gpu_ids: list[str] = field(default_factory=list)
    # Each start of the cell's task: {host, ray_node, at}. More than one: Ray retried it
    # after a worker or node died.
    attempts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Grade:
    verdict: Verdict
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    control_run_id: int | None = None
