"""What every runtime's engine shares: the Engine protocol, health waits, owners and ports.

An engine is a vLLM server the runtime started (a process: ``processes.EngineProcess``;
a container: ``docker.EngineContainer``). Running a cell (``orchestrator.sweep.run_cell``)
uses only this protocol, whatever the runtime.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx
from filelock import FileLock, Timeout

from vmatrix.progress import Step, StepReport


class EngineEnvironment(Protocol):
    """A built engine environment: a venv (``venvs.EngineEnv``) or an image (``docker.EngineImage``)."""

    python: Path  # the engine's interpreter (inside the image, for an image)
    fingerprint: dict[str, Any]  # what is installed, for the run's record
    built: bool  # this call built it (False: reused)


class Engine(Protocol):
    """A started (or startable) vLLM server; ``start`` may follow ``stop`` (a restart)."""

    log_path: Path

    @property
    def base_url(self) -> str: ...
    @property
    def returncode(self) -> int | None: ...
    def start(self) -> None: ...
    def alive(self) -> bool: ...
    def wait_ready(self, timeout_s: float, companions: tuple[Any, ...] = (),
                   on_poll: Callable[[], None] | None = None) -> str: ...
    def stop(self, grace_s: float = 15) -> None: ...
    def signature(self) -> str | None: ...
    def owns(self, pid: int) -> bool:
        """Whether host process ``pid`` is one of this engine's (the GPU's gate asks)."""
        ...


OWNER_ENV = "VMATRIX_ENGINE_OWNER"
CELL_ENV = "VMATRIX_CELL"  # which cell an engine process serves: for the reaper's and tests' eyes


# The kernel's initial pid namespace (PROC_PID_INIT_INO): the host's, outside containers.
INIT_PID_NAMESPACE = str(0xEFFFFFFC)


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:  # no /proc/self/ns (old kernels): one namespace is all there is
        return INIT_PID_NAMESPACE


def owner_id() -> str:
    """``host/pidns:pid`` of this process, as engines and containers are tagged with it.

    The pid namespace is part of the owner: containers on the host network (compose.yaml)
    share the host's name but not its pids, so a pid alone, looked up from another
    namespace, would call a live owner dead and its engines orphans.
    """
    return f"{socket.gethostname()}/{_pid_namespace()}:{os.getpid()}"


def owner_gone(owner: str) -> bool:
    """True if ``owner`` was a process of this host and pid namespace that has exited.

    Owners elsewhere (another host, another container's namespace) cannot be judged
    from here: False. Older tags, ``host:pid`` or a bare pid, were written by
    orchestrators on the host, which is the initial namespace.
    """
    scope, _, pid = owner.rpartition(":")
    if not pid.isdigit():
        return False
    host, sep, namespace = scope.partition("/")
    if (host and host != socket.gethostname()) or (namespace if sep else INIT_PID_NAMESPACE) != _pid_namespace():
        return False
    return not Path(f"/proc/{pid}").exists()


def wait_healthy(url: str, alive: Callable[[], bool], companions: tuple[Any, ...], timeout_s: float,
                 on_poll: Callable[[], None] | None = None) -> str:
    """Poll ``url`` until it answers 200: 'ready', 'exited' (``alive()`` went false),
    'companion_exited' (a sidecar it needs died) or 'timeout'. Shared by every runtime's engine.
    ``on_poll`` runs before each poll (every 0.5 s): the start's progress (runtimes/phases.py)."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            if on_poll is not None:
                on_poll()
            if not alive():
                return "exited"
            if not all(c.alive() for c in companions):
                return "companion_exited"
            try:
                if client.get(url).status_code == 200:
                    return "ready"
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
    return "timeout"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say_if_locked(lock: FileLock, progress: StepReport | None, step: str, detail: str) -> None:
    """Report ``detail`` when another process holds ``lock`` (only to say so: the caller's
    ``with lock`` is the wait itself)."""
    if progress is None:
        return
    try:
        lock.acquire(timeout=0)
        lock.release()
    except Timeout:
        progress(Step(step, detail))
