"""Scrape the engine's Prometheus ``/metrics`` and take counter deltas per phase.

Only the families a grader reads are kept (prefix cache, spec decode, preemptions);
labels other than the engine/model ones are folded into the name so per-position
acceptance survives as ``...per_pos_total{position=2}``.
"""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

KEPT_PREFIXES = ("vllm:prefix_cache_", "vllm:spec_decode_", "vllm:num_preemptions", "vllm:external_prefix_cache_")
_DROPPED_LABELS = {"engine", "model_name"}

Snapshot = dict[str, float]


def parse_metrics(text: str) -> Snapshot:
    out: Snapshot = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(KEPT_PREFIXES) or sample.name.endswith("_created"):
                continue
            labels = {k: v for k, v in sample.labels.items() if k not in _DROPPED_LABELS}
            name = sample.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}" if labels else "")
            out[name] = out.get(name, 0.0) + sample.value  # summed over engines
    return out


SCRAPE_TIMEOUT_S = 30.0


async def scrape(client: aiohttp.ClientSession, base_url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> Snapshot:
    """The engine's counters now, on the replay's own session; raises ``aiohttp.ClientError``
    (a non-2xx answer included) or ``TimeoutError`` (no answer within ``timeout_s``)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with client.get(f"{base_url}/metrics", timeout=timeout, raise_for_status=True) as resp:
        return parse_metrics((await resp.read()).decode("utf-8", "replace"))  # the exposition format is UTF-8


def delta(before: Snapshot, after: Snapshot) -> Snapshot:
    return {name: after[name] - before.get(name, 0.0) for name in after if after[name] != before.get(name, 0.0)}


def total(metrics: dict[str, Snapshot], name: str) -> float:
    """A counter summed over all phases of a transcript."""
    return sum(phase.get(name, 0.0) for phase in metrics.values())
