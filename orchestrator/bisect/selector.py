"""Selecting the cell: a selector like ``prefix_caching=on,speculative=mtp`` names one cell of the matrix.

Also the engine every step keeps (accelerator, patches, LMCache) and the same cell on
another engine recipe.
"""

from __future__ import annotations

from dataclasses import replace
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from vmatrix import selector
from vmatrix.cells import Cell
from vmatrix.orchestrator.bisect.errors import BisectInputError
from vmatrix.orchestrator.spec.engines import EngineSpec
from vmatrix.orchestrator.spec.knobs import KNOB_NAMES, Knobs
from vmatrix.orchestrator.spec.matrix_file import MatrixSpec
from vmatrix.recipe import EngineRecipe

_ENGINE_KEYS = ("patches", "lmcache", "accelerator")


def _knob_type(name: str) -> Any:
    """The knob's value type without ``None`` (``int | None`` -> ``int``)."""
    annotation = Knobs.model_fields[name].annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if get_origin(annotation) in (Union, UnionType) and len(args) == 1 else annotation


def _literals(kind: Any) -> tuple[Any, ...]:
    return get_args(kind) if get_origin(kind) is Literal else ()


def _knob_value(name: str, text: str) -> Any:
    """A selector value typed as the knob is: on/off for toggles, ints, spec methods."""
    text = text.strip()
    if name == "speculative":
        try:
            return selector.speculative(text)
        except ValueError:
            raise BisectInputError("{cell}: speculative={text}: expected METHOD, METHOD:TOKENS or METHOD k=TOKENS, "
                                   "e.g. mtp:2", text=text) from None
    if name == "extra_args":
        return text.split()
    kind = _knob_type(name)
    # "none" is a value of mamba_cache_mode: only knobs it is not a value of read it as unset.
    if text.lower() in ("none", "null", "default") and kind is not bool and text.lower() not in _literals(kind):
        return None
    if kind is bool:
        flag = selector.toggle(text)
        if flag is None:
            raise BisectInputError("{cell}: {name}={text}: expected on/off/true/false", name=name, text=text)
        return flag
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise BisectInputError("{cell}: {name}={text}: expected an integer", name=name, text=text) from None
    return text


def parse_selector(text: str) -> dict[str, Any]:
    """``prefix_caching=on,speculative=mtp`` -> typed filters over a cell's knobs.

    Besides knobs: ``workload=NAME`` and the engine keys ``patches``, ``lmcache`` and
    ``accelerator`` (to pick one engine recipe when the matrix has several).
    """
    filters: dict[str, Any] = {}
    for name, value in selector.split(text, "cell", BisectInputError):
        if name in KNOB_NAMES:
            filters[name] = _knob_value(name, value)
        elif name in ("workload", *_ENGINE_KEYS):
            filters[name] = value.strip()
        else:
            raise BisectInputError("{cell}: unknown knob '{name}' (known: {known}, workload)", name=name,
                                   known=", ".join(KNOB_NAMES))
    if not filters:
        raise BisectInputError("{cell}: empty selector; name knobs, e.g. prefix_caching=on,speculative=mtp")
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
        raise BisectInputError("{cell}: no engine of the matrix has {wanted}",
                               wanted=", ".join(f"{k}={filters[k]}" for k in _ENGINE_KEYS if k in filters))
    kinds = {(e.accelerator, e.patches, e.lmcache) for e in engines}
    if len(kinds) > 1:
        raise BisectInputError("{cell}: the matrix's engines differ in accelerator/patches/lmcache; "
                               "name one with patches=NAME, lmcache=VERSION or accelerator=cpu|cuda")
    return engines[0]


def spec_for(spec: MatrixSpec, engine: EngineSpec, version: str) -> MatrixSpec:
    """The matrix with its engines replaced by one engine of ``version``."""
    return spec.model_copy(update={"engines": [engine.model_copy(update={"vllm": version})]})


def select_cells(plan_cells: list[Cell], filters: dict[str, Any]) -> tuple[Cell, Cell | None]:
    """The one cell the selector names, and its control (None when it is a control)."""
    from vmatrix.orchestrator.plan.matrix import describe_knobs

    found = [c for c in plan_cells if cell_matches(c, filters)]
    # A control that also matches is only wanted when no graded cell does.
    graded = [c for c in found if not c.is_control]
    chosen = graded or found
    if len(chosen) != 1:
        shown = "; ".join(f"{describe_knobs(c.knobs)} [{c.workload.get('name')}]" for c in (chosen or plan_cells))
        what = "no cell" if not chosen else f"{len(chosen)} cells"
        raise BisectInputError("{cell} matches {what} of the matrix ({listed}: {shown}); name more knobs",
                               what=what, listed="have" if not chosen else "matches", shown=shown)
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

