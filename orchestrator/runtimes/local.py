"""The embedded runtime: one virtualenv per engine recipe (venvs.py), engines as local
processes (processes.py). This module is what the two are to the :class:`Runtime`
protocol, and where an engine's argument vector and environment are put together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from vmatrix.images.gpu_gate import cannot_gate
from vmatrix.orchestrator.plan.canary import served_paths
from vmatrix.orchestrator.runtimes.engine import (
    EngineEnvironment,
    free_port,
)
from vmatrix.orchestrator.runtimes.processes import EngineProcess, reap_orphans
from vmatrix.orchestrator.runtimes.venvs import EngineEnv, ensure_env, with_overlay
from vmatrix.orchestrator.stack import lmcache
from vmatrix.orchestrator.stack.engine_args import engine_argv
from vmatrix.progress import StepReport
from vmatrix.recipe import EngineRecipe

if TYPE_CHECKING:
    from vmatrix.orchestrator.runtimes.interface import EngineStart


def vllm_cache_root(env_root: Path) -> Path:
    """The engine environment's own VLLM_CACHE_ROOT.

    vLLM caches what it learns by importing a model class (modelinfos/) in one file per
    class, not per release: engines of two releases sharing ~/.cache/vllm overwrite each
    other's entry, and each start after the other release's imports the model in a
    subprocess of its own, ~20 s on two cores (measured 2026-12-03). Kept beside the venv,
    each release's cache stays warm for as long as its environment does.
    """
    return env_root / "vllm-cache"


@dataclass(frozen=True)
class LocalRuntime:
    """Engine environments as uv venvs in the cache, engines as local processes."""

    sweep: str = ""
    owner: str = ""
    name: ClassVar[str] = "local"
    building: ClassVar[str] = "building env"

    def environment(self, recipe: EngineRecipe, log_dir: Path, progress: StepReport | None = None) -> EngineEnv:
        return ensure_env(recipe, log_dir / f"env-{recipe.env_id}.log", progress)

    def reap(self) -> list[str]:
        return [str(pid) for pid in reap_orphans()]

    def remove_lost_attempts(self, cell_id: str | None = None, node: str | None = None) -> list[tuple[str, str]]:
        return []  # a local engine is a process of its node: it goes with the node

    def cannot_gate_in_engine(self, env: EngineEnvironment) -> str | None:
        assert isinstance(env, EngineEnv)
        site = next((env.root / "lib").glob("python3*/site-packages"), None)
        return cannot_gate(site) if site is not None else f"{env.root} has no site-packages"

    def engine(self, env: EngineEnvironment, start: EngineStart) -> tuple[EngineProcess, lmcache.LMCacheSetup | None]:
        cell = start.cell
        # The cell's own LMCache state (config, L2) lives in its run folder, nowhere shared.
        lmc = lmcache.prepare(cell.knobs, env.python, start.run_dir, (free_port(), free_port()))
        model, draft = served_paths(cell.model.path, cell.model.name, cell.knobs)
        argv = engine_argv(env.python, cell.engine, cell.knobs, model, start.port,
                           kv_transfer=lmc.kv_transfer if lmc else None, draft_model=draft,
                           memory_share=start.memory_share)
        env_vars = dict(start.env)
        if "VLLM_CACHE_ROOT" not in os.environ:
            # The venv is the interpreter's bin/..: the protocol's one path (an EngineEnvironment).
            env_vars["VLLM_CACHE_ROOT"] = str(vllm_cache_root(env.python.parent.parent))
        if start.gpu_ids:
            env_vars["CUDA_VISIBLE_DEVICES"] = ",".join(start.gpu_ids)
        env_vars = with_overlay(env_vars, env.fingerprint)
        engine = EngineProcess(argv=argv, env=env_vars | (lmc.env if lmc else {}), log_path=start.log_path,
                               port=start.port, cpus=start.cpus)
        return engine, lmc
