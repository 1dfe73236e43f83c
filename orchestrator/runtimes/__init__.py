"""Runtimes: where a cell's engine environment is built and its engine runs, picked by name.

- ``local`` (:class:`~orchestrator.runtimes.local.LocalRuntime`): one uv venv per engine
  recipe, engines as local processes; needs no Docker and no GPU.
- ``docker`` (:class:`~orchestrator.runtimes.docker.DockerRuntime`): one image per
  recipe, engines as sibling containers.

Both build an *engine environment* (a venv or an image, content-addressed by the
recipe's ``env_id``) and start an :class:`~orchestrator.runtimes.engine.Engine` in it.
What they are to the rest (the :class:`Runtime` protocol, :class:`EngineStart`) is
``interface.py``; running a cell (``orchestrator.sweep.run_cell``) asks a runtime only through
it (and starts the LMCache sidecar, a local process, itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vmatrix.errors import InputError
from vmatrix.orchestrator.runtimes.interface import EngineStart, Runtime

__all__ = ["RUNTIME_NAMES", "EngineStart", "Runtime", "runtime_named"]

if TYPE_CHECKING:
    from vmatrix.images.build import ImageOptions

RUNTIME_NAMES = ("local", "docker")


def runtime_named(name: str, *, images: ImageOptions | None = None, sweep: str = "", owner: str = "") -> Runtime:
    """The runtime called ``name``; ``images``: how the docker runtime builds images;
    ``sweep``, ``owner``: labels for what it starts (the reaper reads the owner)."""
    kwargs: dict[str, Any] = {"sweep": sweep, "owner": owner}
    if name == "local":
        from vmatrix.orchestrator.runtimes.local import LocalRuntime

        return LocalRuntime(**kwargs)
    if name == "docker":  # the Docker SDK is imported only by sweeps that use it
        from vmatrix.orchestrator.runtimes.docker import DockerRuntime

        return DockerRuntime(images=images, **kwargs)
    raise InputError("{runtime}: unknown runtime {name!r} (known: {known})", name=name, known=", ".join(RUNTIME_NAMES))
