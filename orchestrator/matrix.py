"""Expand a matrix spec into concrete, content-addressed cells.

engines x product(axes) - exclude + include, times workloads; each cell gets the
control it is graded against (the same cell with the control's knobs applied). A
control that is not itself in the matrix is added, so every cell can be graded.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from images.recipe import PatchSetError
from jobs.workload import workload_digest
from orchestrator.canary import CanaryError, canary_dir, canary_recipe, draft_ref, is_canary, model_ref
from orchestrator.engine_args import path_trap
from orchestrator.patch_sources import resolve
from orchestrator.paths import cache_dir
from orchestrator.spec import Knobs, MatrixSpec, Rule, SpecError
from vmatrix.cells import Cell, ModelRef, digest
from vmatrix.recipe import EngineRecipe


@dataclass(frozen=True)
class Plan:
    spec: MatrixSpec
    cells: list[Cell]  # controls first, so grading can start as soon as possible

    @property
    def controls(self) -> list[Cell]:
        return [c for c in self.cells if c.is_control]

    def only_engines(self, wanted: list[str]) -> Plan:
        """The cells of some engines only (by version or label), each with its control.

        Lets a site run a matrix release by release, e.g. while the next release's
        wheels are still being staged; the cell ids are those of the full matrix, so
        a later run of the whole matrix skips what was done.
        """
        have = {c.engine.vllm for c in self.cells} | {c.engine.label for c in self.cells}
        unknown = [w for w in wanted if w not in have]
        if unknown:
            versions = sorted({c.engine.vllm for c in self.cells})
            raise SpecError("{engine} {name}: not an engine of this matrix (engines: {known})", name=unknown[0],
                            known=", ".join(versions))
        return Plan(self.spec, [c for c in self.cells if c.engine.vllm in wanted or c.engine.label in wanted])

    def only_controls(self) -> Plan:
        """The controls alone: run again with ``--rerun``, they measure the noise floor."""
        return Plan(self.spec, self.controls)


def engine_recipes(spec: MatrixSpec, source: str = "matrix") -> list[EngineRecipe]:
    recipes = []
    for i, engine in enumerate(spec.engines):
        if engine.ranged:
            # A range is resolved against the package index first (orchestrator/release_ranges.py).
            raise SpecError(f"{source}: engines[{i}]: {engine.vllm!r} / lmcache {engine.lmcache!r} names releases "
                            "by range; resolve it against the index first")
        try:
            resolved = resolve(engine.patches) if engine.patches else None
        except PatchSetError as exc:
            sep = "" if str(exc).startswith("[") else ": "
            raise SpecError(f"{source}: engines[{i}].patches{sep}{exc}") from None
        recipes.append(
            EngineRecipe(
                vllm=engine.vllm,
                accelerator=engine.accelerator,
                patches=resolved.label if resolved else None,
                patch_digest=resolved.digest if resolved else None,
                lmcache=engine.lmcache,
                patch_paths=resolved.paths if resolved else (),
            )
        )
    return recipes


def _matches(rule: Rule, engine: EngineRecipe, knobs: Knobs) -> bool:
    named = rule.model_fields_set - {"engine"}
    if rule.engine is not None and rule.engine not in (engine.vllm, engine.label):
        return False
    return all(getattr(rule, name) == getattr(knobs, name) for name in named)


def knob_combinations(spec: MatrixSpec) -> list[Knobs]:
    axes = {name: values for name, values in spec.axes if values is not None}
    names = list(axes)
    return [Knobs(**dict(zip(names, values))) for values in itertools.product(*axes.values())]


def expand(spec: MatrixSpec, source: str = "matrix") -> Plan:
    recipes = engine_recipes(spec, source)
    try:
        model = model_ref(spec.model)
    except CanaryError as exc:
        raise SpecError(f"{source}: model: {exc}") from None

    pairs: list[tuple[EngineRecipe, Knobs]] = [
        (engine, knobs)
        for engine in recipes
        for knobs in knob_combinations(spec)
        if not any(_matches(rule, engine, knobs) for rule in spec.exclude)
    ]
    for rule in spec.include:
        values = {name: getattr(rule, name) for name in rule.model_fields_set - {"engine"}}
        for engine in recipes:
            if rule.engine is None or rule.engine in (engine.vllm, engine.label):
                pairs.append((engine, Knobs(**values)))

    control_values = {name: getattr(spec.control, name) for name in spec.control.model_fields_set}
    resources = spec.resources.model_dump()
    cells: dict[str, Cell] = {}
    controls: dict[str, Cell] = {}
    for workload in spec.workloads:
        wl = workload.model_dump(mode="json")
        wl_digest = workload_digest(workload)

        # wl and wl_digest bound now: make is called in this iteration only, but says so.
        def make(engine: EngineRecipe, knobs: Knobs, control_id: str | None, wl: dict = wl,
                 wl_digest: str = wl_digest) -> Cell:
            canonical = with_drafter_digest(knobs.canonical(), source)
            return Cell(
                id=Cell.make_id(engine, canonical, model.digest, wl_digest),
                engine=engine,
                knobs=canonical,
                model=model,
                workload=wl,
                workload_digest=wl_digest,
                control_id=control_id,
                resources=resources,
            )

        for engine, knobs in pairs:
            _refuse_path_trap(model, knobs.canonical(), source, spec.runtime == "docker")
            control = make(engine, knobs.model_copy(update=control_values), None)
            cell = make(engine, knobs, control.id)
            if cell.id == control.id:
                controls[cell.id] = control
            else:
                controls.setdefault(control.id, control)
                cells.setdefault(cell.id, cell)
    ordered = list(controls.values()) + [c for c in cells.values() if c.id not in controls]
    return Plan(spec=spec, cells=ordered)


def _refuse_path_trap(model: ModelRef, knobs: dict[str, Any], source: str, docker: bool) -> None:
    """A folder of the user's whose path vLLM would read another speculative method from
    is refused before anything starts; a canary's is served from a cache copy instead
    (orchestrator.canary.untrapped; with Docker always, orchestrator.canary.on_host_path),
    unless the cache folder names a method too."""
    spec = knobs.get("speculative")
    if not spec:
        return
    try:
        name = draft_ref(spec.get("model"))
    except CanaryError as exc:
        raise SpecError(f"{source}: axes: {exc}") from None
    # The folder vLLM reads the method from: the drafter's, or for MTP the target's.
    path = str(canary_dir(name)) if name else spec.get("model") or model.path
    canary = name is not None or (not spec.get("model") and is_canary(model.name))
    word = path_trap(path, spec["method"])
    if canary and (word is not None or docker):  # served from the cache's copy
        path = str(cache_dir())
        word = path_trap(path, spec["method"])
    if word is None:
        return
    if canary:
        raise SpecError(f"{source}: VMATRIX_CACHE: {path} contains '{word}', which vLLM would take for the "
                        f"speculative method of a {spec['method']} cell; point VMATRIX_CACHE at a folder without it")
    field = "speculative.model" if spec.get("model") else "model.path"
    raise SpecError(f"{source}: {field}: vLLM would read '{word}' in {path} as the speculative method and run "
                    f"it instead of {spec['method']}; rename or move the folder")


def with_drafter_digest(knobs: dict[str, Any], source: str) -> dict[str, Any]:
    """A canary drafter (`speculative.model: canary:NAME`) is named by its recipe's digest
    too, as a canary model is: a retrained drafter is another cell. Other drafters are
    paths, handed to vLLM as written."""
    spec = knobs.get("speculative")
    try:
        name = draft_ref(spec.get("model")) if spec else None
    except CanaryError as exc:
        raise SpecError(f"{source}: axes: {exc}") from None
    if name is None:
        return knobs
    return knobs | {"speculative": spec | {"model_digest": digest(canary_recipe(name))[:16]}}


def describe_knobs(knobs: dict[str, Any], defaults: dict[str, Any] | None = None) -> str:
    """Short text of the knobs that differ from the defaults: for plans and progress lines."""
    defaults = defaults if defaults is not None else Knobs().canonical()
    parts = []
    for name, value in knobs.items():
        if value == defaults.get(name):
            continue
        if name == "speculative" and value:
            drafter = str(value.get("model") or "").removeprefix("canary:").rstrip("/").rsplit("/", 1)[-1]
            parts.append(f"spec={value['method']}:{value['num_speculative_tokens']}" + (f" {drafter}" if drafter else ""))
        elif isinstance(value, bool):
            parts.append(f"{name}={'on' if value else 'off'}")
        elif isinstance(value, list):
            parts.append(f"{name}={' '.join(value)}")
        else:
            parts.append(f"{name}={value}")
    return ", ".join(parts) or "defaults"
