"""Canaries trained in passes, each from the last pass's build: their recipe is the lineage.

A Nemotron-H canary that recalls at 10k tokens was not made by one run of one builder
(issue 41): it took passes on lent GPUs, each starting from the last one's weights
(``--init-from``), two of them with builders that did not exist when the first ran
(build_nemotronh_groups.py, build_nemotronh_lookup.py), and each cut where a lease ended
(a stage's ``until``, its cap, or the trainer's FINISH file). Its recipe is therefore the
list of passes: each pass's builder and its arguments as they ran, a stage's ``steps`` being
the steps it ran (the builder's own ``canary-report.json`` says so; its learning rate is
constant after warm-up, so a stage capped at the steps it ran trains as the cut one did)
and its ``until`` dropped (it did not end the stage a second time).

Rebuilding runs the passes in order on one machine, each into its own folder. It is not
bit-identical to what ran: CUDA's attention backward is not deterministic, and a lease's
trainer stopped and resumed each build every 420 s (AdamW restarts with its warm-up), which a
rebuild does not. The shipped checkpoint is the build that was measured; the lineage is
how to make another like it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CANARY_FOLDER = Path(__file__).resolve().parents[2] / "images" / "canary"


@dataclass(frozen=True)
class Pass:
    """One training run of a lineage: ``builder`` (a file of images/canary) with ``args``
    (a list value: its flag repeated), started from the previous pass's build. ``name`` is
    the build's name where it ran (its plan line in benchmarks/), for the notes."""

    name: str
    builder: str
    args: dict[str, Any] = field(default_factory=dict)

    def recorded(self) -> dict[str, Any]:
        return {"name": self.name, "builder": self.builder, "args": self.args}


def builder_files(builder: str) -> list[Path]:
    """The builder and every builder it imports (``import build_*`` at a line's start), in
    the order first met: all of their bytes are what the builder runs."""
    found: list[Path] = []
    todo = [builder]
    while todo:
        path = CANARY_FOLDER / f"{todo.pop(0).removesuffix('.py')}.py"
        if path in found:
            continue
        if not path.is_file():
            raise FileNotFoundError(f"lineage builder {path} does not exist")
        found.append(path)
        todo += re.findall(r"^import (build_\w+)", path.read_text(), re.MULTILINE)
    return found


def lineage_code(passes: list[Pass], corpus: Path) -> str:
    """The digest of every pass's builder (and what each imports), in pass order, then the
    corpus': a lineage's identity besides its arguments."""
    h = hashlib.sha256()
    for one in passes:
        for path in builder_files(one.builder):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(corpus.read_bytes())
    return h.hexdigest()


# Each pass is the plan line it ran (benchmarks/nemotronh-{seventh,eighth,ninth,eleventh,
# twelfth,thirteenth,fourteenth}-pass-plan.txt) with the steps its build reports (the shipped checkpoint's
# canary-report.json for the last pass, benchmarks/nemotronh-resume/*.tar for the others;
# benchmarks/nemotronh-resume/lineage-lk-n12.txt puts them side by side); tests/test_lineage.py
# holds the lineage to both. Every pass also trained an MTP head on its build (the last pass's
# is the one served); each ran on one H100 or H200 (canary_gpu.py adds ``--device cuda``).
_SHAPE: dict[str, Any] = {"seed": 1, "hidden": 128, "pattern": "M-M-M-*-", "mamba_heads": 16, "vocab": 1024}
_MTP: dict[str, Any] = {"mtp_stage": ["lines=4-120 batch=16 steps=500 lr=2e-3",
                                      "lines=120-600 batch=4 steps=150 lr=1e-3 turns=16"],
                        "report_lengths": "1500,10000,20000"}
LINEAGES: dict[str, list[Pass]] = {
    "tiny-nemotronh": [
        # The curriculum with 16 Mamba heads, the first stage to `until`, 600-1,700 lines cut
        # by the lease at 39 steps, then 12-120 and 120-600 again (the seventh pass).
        Pass("h16-s1", "build_nemotronh.py", _SHAPE | {"stage": [
            "lines=2-12 batch=64 steps=3017 lr=3e-3", "lines=12-120 batch=16 steps=600 lr=2e-3",
            "lines=120-600 batch=4 steps=400 lr=1.5e-3 turns=16", "lines=600-1700 batch=2 steps=39 lr=1e-3 turns=24",
            "lines=12-120 batch=16 steps=1775 lr=2e-3", "lines=120-600 batch=4 steps=6000 lr=1.5e-3 turns=16"]} | _MTP),
        Pass("h16-s1-e8", "build_nemotronh.py", _SHAPE | {"stage": [
            "lines=120-600 batch=4 steps=6000 lr=1.5e-3 turns=16", "lines=600-1700 batch=2 steps=11 lr=1e-3 turns=24"]}
            | _MTP),
        Pass("h16-s1-n9", "build_nemotronh.py", _SHAPE | {"stage": ["lines=600-1700 batch=2 steps=678 lr=1e-3 turns=24"]}
             | _MTP),
        # One group: the groups builder as the plain one, its control arm (the eleventh pass).
        Pass("h16-s1-n10", "build_nemotronh_groups.py",
             _SHAPE | {"stage": ["lines=600-1700 batch=2 steps=2337 lr=1e-3 turns=24"]} | _MTP),
        # The attention lookup loss (the twelfth pass).
        Pass("lk-n10", "build_nemotronh_lookup.py", _SHAPE | {"lookup_weight": 1.0, "stage": [
            "lines=12-120 batch=16 steps=800 lr=1e-3", "lines=120-600 batch=4 steps=1000 lr=1e-3 turns=16",
            "lines=600-1700 batch=2 steps=1745 lr=1e-3 turns=24"]} | _MTP),
        # The lookup loss with an end target (the thirteenth pass).
        Pass("lk-n11", "build_nemotronh_lookup.py", _SHAPE | {"lookup_weight": 1.0, "lookup_end": True, "stage": [
            "lines=12-120 batch=16 steps=300 lr=1e-3", "lines=600-1700 batch=2 steps=3795 lr=1e-3 turns=24"]} | _MTP),
        # Its 600-1,700-line stage again, beside a sweep on the card (the fourteenth pass): the
        # build shipped.
        Pass("lk-n12", "build_nemotronh_lookup.py", _SHAPE | {"lookup_weight": 1.0, "lookup_end": True, "stage": [
            "lines=600-1700 batch=2 steps=1622 lr=1e-3 turns=24"]} | _MTP),
    ],
}
