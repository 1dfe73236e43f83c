"""Runtimes: where a cell's engine environment is built and its engine runs, picked by name.

- ``local`` (:class:`~orchestrator.runtimes.local.LocalRuntime`): one uv venv per engine
  recipe, engines as local processes; needs no Docker and no GPU.
- ``docker`` (:class:`~orchestrator.runtimes.docker.DockerRuntime`): one image per
  recipe, engines as sibling containers.

Both build an *engine environment* (a venv or an image, content-addressed by the
recipe's ``env_id``) and start an :class:`~orchestrator.runtimes.engine.Engine` in it;
running a cell (``orchestrator.run_cell``) sees only the :class:`Runtime` protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from vmatrix.errors import InputError

if TYPE_CHECKING:
    from vmatrix.cells import Cell
    from vmatrix.images.build import ImageOptions
    from vmatrix.orchestrator.lmcache import LMCacheSetup
    from vmatrix.orchestrator.runtimes.engine import Engine, EngineEnvironment
    from vmatrix.progress import StepReport
    from vmatrix.recipe import EngineRecipe

RUNTIME_NAMES = ("local", "docker")


@dataclass(frozen=True)
class EngineStart:
    """What a runtime needs to start one cell's engine, whatever the runtime."""

    cell: Cell
    env: dict[str, str]  # the engine's environment variables
    port: int  # on the host, bound to 127.0.0.1
    cpus: tuple[int, ...]  # host CPUs to bind the engine to; () = all
    gpu_ids: list[str]  # Ray's ids for the task
    log_path: Path  # the engine's log
    run_dir: Path  # the cell run's own folder (LMCache state)
    memory_share: float | None = None  # --gpu-memory-utilization on a GPU shared with other cells


class Runtime(Protocol):
    name: str
    building: str  # the phase shown while the environment is built
    owner: str  # host/pidns:pid of the sweep's driver, or "": what the reaper judges engines by

    def environment(self, recipe: EngineRecipe, log_dir: Path, progress: StepReport | None = None) -> EngineEnvironment:
        """The recipe's engine environment, built first if absent (its build log in
        ``log_dir``; its steps to ``progress``); raises BuildError."""
        ...

    def reap(self) -> list[str]:
        """Remove what this runtime left behind for orchestrators that were killed; what was removed."""
        ...

    def remove_lost_attempts(self, cell_id: str | None = None, node: str | None = None) -> list[tuple[str, str]]:
        """Remove engines this sweep's driver started on attempts whose node was lost (of
        one cell, on one Ray node), which nothing else would stop; (cell id, name) each."""
        ...

    def cannot_gate_in_engine(self, env: EngineEnvironment) -> str | None:
        """Why an engine of ``env`` cannot take its GPU's gate itself (images/gpu_gate:
        the orchestrator then holds it around the whole start); None when it can."""
        ...

    def engine(self, env: EngineEnvironment, start: EngineStart) -> tuple[Engine, LMCacheSetup | None]:
        """An engine for ``start.cell`` in ``env``, not started yet; raises BuildError
        when the cell cannot run in this runtime."""
        ...


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
