"""Engines outlive a SIGKILLed orchestrator; the reaper finds them by owner tag."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from vmatrix.orchestrator.runtimes.engine import INIT_PID_NAMESPACE, OWNER_ENV, owner_gone, owner_id
from vmatrix.orchestrator.runtimes.processes import reap_orphans


def test_orphaned_engine_children_are_killed_and_owned_ones_kept() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    orphan = subprocess.Popen(sleeper, env={**os.environ, OWNER_ENV: str(dead.pid)})
    owned = subprocess.Popen(sleeper, env={**os.environ, OWNER_ENV: str(os.getpid())})
    try:
        time.sleep(0.2)
        killed = reap_orphans()
        assert orphan.pid in killed and owned.pid not in killed
        assert orphan.wait(5) == -9
        assert owned.poll() is None
    finally:
        for p in (orphan, owned):
            p.kill()
            p.wait()


def test_owner_is_host_and_pid_and_other_hosts_are_left_alone() -> None:
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    here = socket.gethostname()
    orphan = subprocess.Popen(sleeper, env={**os.environ, OWNER_ENV: f"{owner_id().rpartition(':')[0]}:{dead.pid}"})
    # The same pid on another host says nothing about this one: a driver elsewhere.
    remote = subprocess.Popen(sleeper, env={**os.environ, OWNER_ENV: f"elsewhere-{here}:{dead.pid}"})
    try:
        time.sleep(0.2)
        killed = reap_orphans()
        assert orphan.pid in killed and remote.pid not in killed
        assert remote.poll() is None
    finally:
        for p in (orphan, remote):
            p.kill()
            p.wait()


def test_owner_in_another_pid_namespace_of_this_host_is_not_judged() -> None:
    # Compose nodes run on the host network: same host name, their own pids. A pid
    # that does not exist here may be a live orchestrator in another namespace.
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = socket.gethostname()
    scope = owner_id().rpartition(":")[0]
    assert scope.startswith(f"{here}/")
    assert owner_gone(f"{scope}:{dead.pid}")
    assert not owner_gone(owner_id())
    assert not owner_gone(f"{here}/1:{dead.pid}")  # another namespace: keep
    # Older tags (host:pid) came from the host: judged there only, never from a container.
    assert owner_gone(f"{here}:{dead.pid}") == (scope.partition("/")[2] == INIT_PID_NAMESPACE)
    assert not owner_gone(f"elsewhere-{here}/{scope.partition('/')[2]}:{dead.pid}")
    assert not owner_gone("garbage")
