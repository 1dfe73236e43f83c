"""compose.yaml and its no-GPU override, as the Compose tool reads them (`config`: no
containers, no daemon calls). The stack brought up for real, with a sweep through it:
tests/test_cluster.py (minutes; its timings in docs/cluster.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> list[str] | None:
    # Compose v2 (a docker CLI plugin) or docker-compose 1.29 (Debian bookworm's package).
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


COMPOSE = _compose()
pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(COMPOSE is None, reason="no Compose tool (docker compose / docker-compose)")]


def _config(*files: str, **env: str) -> dict[str, Any]:
    argv = [*COMPOSE, "--project-directory", str(ROOT)]  # type: ignore[misc]
    for f in files:
        argv += ["-f", str(ROOT / f)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VMATRIX_")}
    out = subprocess.run([*argv, "config"], check=False, capture_output=True, text=True, env=clean | env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def _started(config: dict[str, Any]) -> dict[str, Any]:
    # What `up` starts: services behind a profile wait for --profile.
    return {name: s for name, s in config["services"].items() if not s.get("profiles")}


def _devices(service: dict[str, Any]) -> list[Any]:
    return service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])


def test_gpu_stack_reserves_all_gpus_on_the_worker_only() -> None:
    config = _config("compose.yaml")
    started = _started(config)
    assert set(started) == {"ray-head", "ray-worker"}
    assert _devices(started["ray-head"]) == []
    assert _devices(started["ray-worker"])[0]["count"] == "all"
    head = started["ray-head"]
    assert "--dashboard-host=127.0.0.1" in head["command"] and "--num-gpus=0" in head["command"]
    # Defaults elsewhere: a registry's slim Python, the canonical Ray port.
    assert head["build"]["args"]["BASE"] == "python:3.11-slim-bookworm"
    assert "--address=127.0.0.1:6379" in started["ray-worker"]["command"]
    for s in started.values():
        assert s["network_mode"] == "host"  # engines publish on the host's 127.0.0.1
        assert any(str(v).startswith("/var/run/docker.sock:") for v in _volumes(s))


def _volumes(service: dict[str, Any]) -> list[str]:
    # 1.29 prints "src:dst:mode"; v2 prints {type, source, target}.
    return [v if isinstance(v, str) else f"{v.get('source')}:{v['target']}" for v in service.get("volumes", [])]


def test_cpu_override_starts_no_device_reservation_and_logical_gpus() -> None:
    config = _config("compose.yaml", "compose.cpu.yaml", VMATRIX_ORCH_BASE="vmatrix/base:bookworm",
                     VMATRIX_CACHE="/root/.cache/vmatrix", VMATRIX_RAY_PORT="6389")
    started = _started(config)
    assert set(started) == {"ray-head", "ray-worker-cpu", "ray-worker-cpu-2"}
    assert all(_devices(s) == [] for s in started.values())
    for name in ("ray-worker-cpu", "ray-worker-cpu-2"):
        worker = started[name]
        assert "--num-gpus=2" in worker["command"] and "--address=127.0.0.1:6389" in worker["command"]
        assert worker["build"]["args"]["BASE"] == "vmatrix/base:bookworm"
    # Two nodes on the host network: their agents and exporters must not share a port.
    ports = [(c.split("--dashboard-agent-listen-port=")[1].split()[0], c.split("--metrics-export-port=")[1].split()[0])
             for c in (started["ray-worker-cpu"]["command"], started["ray-worker-cpu-2"]["command"])]
    assert ports[0][0] != ports[1][0] and ports[0][1] != ports[1][1], ports
    # The cache is a host path at the same path inside: the daemon is handed host paths.
    for s in started.values():
        assert s["environment"]["VMATRIX_CACHE"] == "/root/.cache/vmatrix"
        assert "/root/.cache/vmatrix:/root/.cache/vmatrix" in {v.rsplit(":", 1)[0] if v.count(":") > 1 else v
                                                               for v in _volumes(s)}
