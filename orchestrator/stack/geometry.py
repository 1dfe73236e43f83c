"""Knob combinations that break a known geometry rule, found before any engine starts.

The rules are the ones users hit on hybrid stacks (shared/DOMAIN.md, "Constraints
that bite"). A cell that breaks one is recorded ``invalid`` with the rule, and no
engine start is spent on it, unless the matrix says ``run_invalid: true`` (to see
what the engine itself says).

Only what the knobs state is checked: a block size left to the engine (``None``) is
chosen at start time from the model's page sizes, so rules that need it cannot be
decided here and are left to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from vmatrix.recipe import EngineRecipe

# LMCache's own default chunk size (lmcache.v1.config, 0.5.x), used when the knob is unset.
LMCACHE_DEFAULT_CHUNK = 256


# The first release whose engine reads VLLM_USE_V2_MODEL_RUNNER on each accelerator, found
# in the wheels' sources (vllm/envs.py and vllm/v1/worker/{gpu,cpu}_worker.py): the
# variable appears in 0.12.0 (absent from 0.11.0); the CPU worker builds the V2 runner
# from 0.23.0 on (0.22.0's cpu_worker.py does not look at it). Older engines
# would ignore the variable without a word, so the cell could not be what it says.
MODEL_RUNNER_SINCE = {"cuda": Version("0.12.0"), "cpu": Version("0.23.0")}


@dataclass(frozen=True)
class Violation:
    rule: str  # short name, stable: what a query or a bisect predicate can match
    detail: str  # the rule with this cell's numbers

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


def lmcache_on(knobs: dict[str, Any]) -> bool:
    return knobs.get("lmcache_connector") is not None


def violations(engine: EngineRecipe, knobs: dict[str, Any]) -> list[Violation]:
    """Every rule the cell's knobs break, in a fixed order (the first is the signature)."""
    found: list[Violation] = []
    block = knobs.get("block_size")
    batched = knobs.get("max_num_batched_tokens")
    if lmcache_on(knobs) and not engine.lmcache:
        found.append(Violation(
            "lmcache-not-installed",
            f"lmcache_connector {knobs['lmcache_connector']} needs an engine with `lmcache: VERSION` "
            f"({engine.label} has none)"))
    if lmcache_on(knobs) and block is not None:
        chunk = knobs.get("lmcache_chunk_size") or LMCACHE_DEFAULT_CHUNK
        if chunk % block:
            found.append(Violation(
                "lmcache-chunk-multiple-of-block",
                f"LMCache chunk size ({chunk}) must be a multiple of block_size ({block})"))
    if knobs.get("mamba_cache_mode") == "align" and block is not None and batched is not None:
        if block > batched:
            found.append(Violation(
                "align-block-le-batched",
                f"align mode needs block_size ({block}) <= max_num_batched_tokens ({batched})"))
        elif lmcache_on(knobs) and batched >= 2 * block:
            found.append(Violation(
                "align-lmcache-batched-lt-2-blocks",
                f"align mode with LMCache needs max_num_batched_tokens ({batched}) < 2 * block_size ({2 * block})"))
    runner = knobs.get("model_runner")
    since = MODEL_RUNNER_SINCE[engine.accelerator]
    if runner is not None and Version(engine.vllm).release < since.release:
        found.append(Violation(
            "model-runner-unknown-to-release",
            f"model_runner {runner}: {engine.distribution} {engine.vllm} does not read VLLM_USE_V2_MODEL_RUNNER "
            f"(its {engine.accelerator} engine does from {since} on)"))
    return found
