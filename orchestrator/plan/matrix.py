"""Expand a matrix spec into concrete, content-addressed cells.

engines x product(axes) - exclude + include, times workloads; each cell gets the
control it is graded against (the same cell with the control's knobs applied). A
control that is not itself in the matrix is added, so every cell can be graded.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from vmatrix.cells import Cell, ModelRef, digest
from vmatrix.errors import SpecError
from vmatrix.images.recipe import PatchSetError
from vmatrix.jobs.workload import workload_digest
from vmatrix.orchestrator.paths import cache_dir
from vmatrix.orchestrator.plan.canary import CanaryError, canary_dir, canary_recipe, draft_ref, is_canary, model_ref
from vmatrix.orchestrator.plan.patch_sources import resolve
from vmatrix.orchestrator.spec.knobs import Knobs, Rule
from vmatrix.orchestrator.spec.matrix_file import GPU_HEADROOM, MatrixSpec, Resources
from vmatrix.orchestrator.stack.engine_args import MEMORY_FLAG, flag_value, path_trap
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

    def only_cells(self, keep: Callable[[Cell], bool]) -> Plan:
        """The cells ``keep`` picks, each with its control (a hunting matrix is large; a
        host runs the part it has time for, with the same cell ids)."""
        picked = [c for c in self.cells if keep(c)]
        controls = {c.control_id for c in picked if c.control_id}
        return Plan(self.spec, [c for c in self.cells if c in picked or c.id in controls])

    def only_controls(self) -> Plan:
        """The controls alone: run again with ``--rerun``, they measure the noise floor."""
        return Plan(self.spec, self.controls)


def engine_recipes(spec: MatrixSpec, source: str = "matrix") -> list[EngineRecipe]:
    recipes = []
    for i, engine in enumerate(spec.engines):
        if engine.ranged:
            # A range is resolved against the package index first (orchestrator/plan/release_ranges.py).
            raise SpecError(f"{source}: engines[{i}]: {engine.vllm!r} / lmcache {engine.lmcache!r} names releases "
                            "by range; resolve it against the index first")
        try:
            resolved = resolve(engine.patches, engine.vllm) if engine.patches else None
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
    fraction = packing_fraction()
    cells: dict[str, Cell] = {}
    controls: dict[str, Cell] = {}
    for workload in spec.workloads:
        wl = workload.model_dump(mode="json")
        wl_digest = workload_digest(workload)

        # wl and wl_digest bound now: make is called in this iteration only, but says so.
        def make(engine: EngineRecipe, knobs: Knobs, control_id: str | None, wl: dict = wl,
                 wl_digest: str = wl_digest) -> Cell:
            canonical = with_drafter_digest(knobs.canonical(), source)
            resources = cell_resources(spec.resources, engine, canonical, fraction if is_canary(model.name) else None,
                                       source)
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


GPU_FRACTION_ENV = "VMATRIX_GPU_FRACTION"


def packing_fraction() -> float | None:
    """``VMATRIX_GPU_FRACTION``: the share of a GPU that a canary cell asking for one whole
    GPU gets instead (images/offline-host.sh sets it), so that several such engines share
    a GPU; unset or empty: cells keep what their matrix asks for."""
    text = os.environ.get(GPU_FRACTION_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{GPU_FRACTION_ENV}: {text!r} is not a number") from None
    if not 0 < value <= 1:
        raise SpecError(f"{GPU_FRACTION_ENV}: {text!r}: a share of one GPU is above 0 and at most 1")
    try:
        return Resources(gpus=value).gpus
    except ValidationError as exc:
        raise SpecError(f"{GPU_FRACTION_ENV}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None


def cell_resources(resources: Resources, engine: EngineRecipe, knobs: dict[str, Any], packed: float | None,
                   source: str) -> dict[str, float]:
    """What one cell asks Ray for: the matrix's ``resources``, or with ``packed`` (a canary
    cell under VMATRIX_GPU_FRACTION) that share of a GPU in place of one whole GPU, grown
    to fit the cell's own --gpu-memory-utilization. A share of a GPU holds at most its
    memory share: a --gpu-memory-utilization above it is refused here (it would take the
    memory of the GPU's other engines)."""
    if engine.accelerator != "cuda":
        return resources.model_dump()
    text = flag_value(tuple(knobs.get("extra_args") or ()), MEMORY_FLAG)
    try:
        explicit = float(text) if text is not None else None
    except ValueError:
        explicit = None  # vLLM's argument parser refuses it, as the cell's recorded outcome
    if packed is not None and resources.gpus == 1:
        gpus = max(packed, round(explicit + GPU_HEADROOM, 4)) if explicit is not None else packed
        resources = resources.model_copy(update={"gpus": min(gpus, 1.0)})
    share = resources.memory_share
    if share is not None and explicit is not None and explicit > share:
        raise SpecError(f"{source}: extra_args: {MEMORY_FLAG} {text} is more than the memory share of "
                        f"resources.gpus {resources.gpus:g} ({share:g}: the fraction less {GPU_HEADROOM} of the GPU "
                        f"each engine keeps outside it); lower it, or leave it out to get the share")
    return resources.model_dump()


def _refuse_path_trap(model: ModelRef, knobs: dict[str, Any], source: str, docker: bool) -> None:
    """A folder of the user's whose path vLLM would read another speculative method from
    is refused before anything starts; a canary's is served from a cache copy instead
    (orchestrator.plan.canary.untrapped; with Docker always, orchestrator.plan.canary.on_host_path),
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
