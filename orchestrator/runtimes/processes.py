"""Engines as local processes: started in their own process group, bound to their CPUs,
dying with the orchestrator that started them, stopped as a group; and the reaper of
engines whose orchestrator was killed. The local runtime runs its engines this way, and
``run_cell`` its LMCache sidecar.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmatrix.orchestrator.runtimes.affinity import format_cpulist
from vmatrix.orchestrator.runtimes.engine import (
    OWNER_ENV,
    owner_gone,
    owner_id,
    wait_healthy,
)
from vmatrix.orchestrator.runtimes.signature import error_signature


def _die_with_parent() -> None:
    # If the Ray worker that owns this engine is SIGKILLed, take the engine with it.
    # The signal fires when the *thread* that forked the engine exits, hence _spawn.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _engine_preexec(cpus: tuple[int, ...]) -> Callable[[], None]:
    def preexec() -> None:
        _die_with_parent()
        if cpus:  # inherited by every process the engine spawns
            os.sched_setaffinity(0, cpus)

    return preexec


# PR_SET_PDEATHSIG follows the forking thread, not the process: an engine restarted
# from asyncio.to_thread was SIGKILLed the moment asyncio.run shut its pool down,
# right after a replay that it had served in full (a cell recorded `crashed`). Every
# engine is therefore forked from this one thread, which lives as long as the worker.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vmatrix-engine-spawner")


def _spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    return _spawner.submit(subprocess.Popen, argv, **kwargs).result()


def reap_orphans() -> list[int]:
    """Kill engine processes whose owner (the orchestrator that ran their sweep) is gone.

    Engines are tagged with their owner (:func:`owner_id`) in the environment: the
    sweep's driver, not the Ray worker that started them, which a killed driver's
    cluster may keep alive for a while. Parent-death signals reach only the engine's
    leader; vLLM's engine-core and worker children survive a SIGKILLed orchestrator,
    holding cores and memory. Owners on other hosts (or in other pid namespaces) are
    left alone. Returns killed pids.
    """
    killed = []
    for pid, owner in tagged(OWNER_ENV).items():
        if not owner_gone(owner):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    return killed


def tagged(variable: str) -> dict[int, str]:
    """pid -> the value of ``variable`` in its environment, for every live process that
    carries it (engines carry their owner, OWNER_ENV, and their cell, CELL_ENV)."""
    found = {}
    prefix = variable.encode() + b"="
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        value = next((e[len(prefix):].decode() for e in env if e.startswith(prefix)), None)
        if value is not None:
            found[int(proc.name)] = value
    return found


def _engine_environ(extra: dict[str, str]) -> dict[str, str]:
    # PYTHONPATH belongs to the orchestrator (an offline host puts vmatrix's own
    # dependencies there); in the engine it would shadow the venv's packages.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The sweep passes its driver as the owner; an engine started outside a sweep is its starter's.
    return env | {OWNER_ENV: owner_id()} | extra


def group_pids(pgid: int) -> list[int]:
    """The live processes of group ``pgid`` (zombies, whose memory is freed, do not count)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ')'.
            state, _, pgrp = stat.read_text().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):
            continue
        if int(pgrp) == pgid and state not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def _group_alive(pgid: int) -> bool:
    return bool(group_pids(pgid))


@dataclass
class EngineProcess:
    """A vLLM server in its own process group, so teardown reaches every child.

    ``start`` may be called again after ``stop`` (an engine restart inside a cell):
    the log is appended to, and ``signature`` reads only what this start wrote, so a
    previous start's shutdown noise is never taken for the new one's error.
    """

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    port: int
    health_path: str = "/health"
    cpus: tuple[int, ...] = ()  # bind the engine to these host CPUs (runtimes/affinity.py); () = all
    proc: subprocess.Popen[bytes] | None = None
    _log: Any = field(default=None, repr=False)
    _log_offset: int = field(default=0, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log_offset = self._log.tell()
        # A restart appends: start its command line on a line of its own.
        self._log.write(("\n" if self._log_offset else "").encode() + ("$ " + " ".join(self.argv) + "\n").encode())
        if self.cpus:
            self._log.write(f"# bound to CPUs {format_cpulist(self.cpus)}\n".encode())
        self._log.flush()
        self.proc = _spawn(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_engine_environ(self.env),
            start_new_session=True,
            preexec_fn=_engine_preexec(self.cpus),
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    def wait_ready(self, timeout_s: float, companions: tuple[EngineProcess, ...] = (),
                   on_poll: Callable[[], None] | None = None) -> str:
        """'ready', 'exited', 'companion_exited' (a sidecar it needs died) or 'timeout'."""
        return wait_healthy(f"{self.base_url}{self.health_path}", self.alive, companions, timeout_s, on_poll)

    def stop(self, grace_s: float = 15) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.proc is not None:
            # The group may outlive its leader (engine-core children): reap it too, and
            # wait until it is gone: a GPU engine's memory is free only then, and the next
            # engine on that GPU may be let in (runtimes/gpu_share.py).
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            deadline = time.monotonic() + 10
            while _group_alive(self.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        if self._log is not None:
            self._log.close()
            self._log = None

    def owns(self, pid: int) -> bool:
        # The engine's processes keep its process group (start_new_session), whatever they fork.
        try:
            return self.proc is not None and os.getpgid(pid) == self.proc.pid
        except OSError:
            return False

    def signature(self) -> str | None:
        if not self.log_path.exists():
            return None
        with self.log_path.open("rb") as fh:
            fh.seek(self._log_offset)
            text = fh.read().decode(errors="replace")
        return error_signature(text, self.proc.returncode if self.proc else None)
