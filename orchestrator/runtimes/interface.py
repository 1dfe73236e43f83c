"""What every runtime is to the rest of vmatrix: the :class:`Runtime` protocol and the
:class:`EngineStart` a runtime gets for one cell's engine.

Its own module, as vLLM keeps ``sched/interface.py`` beside its scheduler: the runtimes
(local.py, docker.py) import it, and the package's ``__init__`` (which picks a runtime by
name and so imports them) is imported by none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from vmatrix.cells import Cell
    from vmatrix.orchestrator.runtimes.engine import Engine, EngineEnvironment
    from vmatrix.orchestrator.stack.lmcache import LMCacheSetup
    from vmatrix.progress import StepReport
    from vmatrix.recipe import EngineRecipe


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
