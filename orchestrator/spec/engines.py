"""Which engines a matrix runs: a vLLM release (or a range of them) with its patch sets,
and the model they serve."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Tag,
    field_validator,
    model_validator,
)

from vmatrix.images.recipe import patches_dir
from vmatrix.orchestrator.spec.knobs import Strict

PatchTarget = Literal["vllm", "lmcache"]


class PatchEntry(Strict):
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


class EngineSpec(Strict):
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
        # package index before cells are made (orchestrator/plan/release_ranges.py).
        from vmatrix.orchestrator.stack.versions import release_choice

        if v is not None:
            release_choice(v)
        return v

    @property
    def ranged(self) -> bool:
        from vmatrix.orchestrator.stack.versions import is_range

        return is_range(self.vllm) or is_range(self.lmcache)


class ModelSpec(Strict):
    canary: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ModelSpec:
        if (self.canary is None) == (self.path is None):
            raise ValueError("give exactly one of `canary: NAME` or `path: DIR`")
        return self
