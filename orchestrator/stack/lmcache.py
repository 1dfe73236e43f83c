"""What a cell with LMCache needs besides the engine: config file, environment, sidecar.

Everything a cell's LMCache keeps lives in that cell's run folder: L1 lives in the
process that owns it (the engine, or the sidecar server), L2 in ``<run>/l2``. So
cells never share state (a poisoned entry of one cell cannot leak into another),
while an engine restart inside one cell finds the same L2, which is what a restart
point of a trace tests (docs/lmcache.md).

Two connectors:

- ``LMCacheConnectorV1``: LMCache inside the engine, configured by a YAML file named
  in ``LMCACHE_CONFIG_FILE``.
- ``LMCacheMPConnector``: the engine talks (ZMQ) to a separate LMCache server, the
  sidecar, started and health-checked before the engine and stopped after it. It
  keeps running across an engine restart, as it would in production.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vmatrix.orchestrator.stack.geometry import lmcache_on

CONFIG_NAME = "lmcache.yaml"
# L2 is capped so a long trace cannot fill the disk of a shared host.
L2_DISK_GB = 5.0
# The in-engine connector's own L1 default (max_local_cpu_size, 0.5.x), given to the
# server too so an unset lmcache_l1_gb means the same for both connectors.
MP_DEFAULT_L1_GB = 5.0


@dataclass(frozen=True)
class Sidecar:
    """The LMCache server of an ``LMCacheMPConnector`` cell."""

    argv: list[str]
    port: int  # ZMQ requests from the engine
    http_port: int  # health check

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/healthcheck"


@dataclass(frozen=True)
class LMCacheSetup:
    kv_transfer: dict[str, Any]  # --kv-transfer-config
    env: dict[str, str]  # for the engine
    l2_dir: Path | None
    config_path: Path | None  # V1's YAML, written into the run folder
    sidecar: Sidecar | None


def v1_config(knobs: dict[str, Any], l2_dir: Path | None) -> dict[str, Any]:
    """LMCache's YAML for the in-engine connector; unset knobs keep LMCache's defaults."""
    config: dict[str, Any] = {"local_cpu": True}
    if knobs.get("lmcache_chunk_size") is not None:
        config["chunk_size"] = knobs["lmcache_chunk_size"]
    if knobs.get("lmcache_l1_gb") is not None:
        config["max_local_cpu_size"] = knobs["lmcache_l1_gb"]
    if l2_dir is not None:
        config["local_disk"] = f"file://{l2_dir}/"
        config["max_local_disk_size"] = L2_DISK_GB
    return config


def sidecar_argv(python: Path, knobs: dict[str, Any], l2_dir: Path | None, port: int, http_port: int) -> list[str]:
    argv = [
        str(python), "-m", "lmcache.v1.multiprocess.http_server",
        "--host", "127.0.0.1", "--port", str(port),
        "--http-host", "127.0.0.1", "--http-port", str(http_port),
    ]  # fmt: skip
    if knobs.get("lmcache_chunk_size") is not None:
        argv += ["--chunk-size", str(knobs["lmcache_chunk_size"])]
    # The server has no default L1 and refuses to start without one ("Legacy L1
    # configuration requires --l1-size-gb and --eviction-policy", 0.5.6).
    argv += ["--l1-size-gb", str(knobs.get("lmcache_l1_gb") or MP_DEFAULT_L1_GB), "--eviction-policy", "LRU"]
    if l2_dir is not None:
        argv += ["--l2-adapter", json.dumps({"type": "fs", "base_path": str(l2_dir)})]
    return argv


def prepare(knobs: dict[str, Any], python: Path, run_dir: Path, ports: tuple[int, int]) -> LMCacheSetup | None:
    """Write the cell's LMCache files into ``run_dir``; None when the cell has no LMCache.

    ``ports``: two free ports, used by the sidecar (ZMQ, HTTP) when the connector needs one.
    """
    if not lmcache_on(knobs):
        return None
    connector = knobs["lmcache_connector"]
    run_dir.mkdir(parents=True, exist_ok=True)
    l2_dir = run_dir / "l2" if knobs.get("lmcache_l2_disk") else None
    if l2_dir is not None:
        l2_dir.mkdir(exist_ok=True)
    kv_transfer: dict[str, Any] = {"kv_connector": connector, "kv_role": knobs.get("kv_role") or "kv_both"}
    if connector == "LMCacheMPConnector":
        sidecar = Sidecar(sidecar_argv(python, knobs, l2_dir, *ports), *ports)
        kv_transfer["kv_connector_extra_config"] = {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": ports[0]}
        return LMCacheSetup(kv_transfer, {}, l2_dir, None, sidecar)
    config_path = run_dir / CONFIG_NAME
    config_path.write_text(yaml.safe_dump(v1_config(knobs, l2_dir), sort_keys=True))
    return LMCacheSetup(kv_transfer, {"LMCACHE_CONFIG_FILE": str(config_path)}, l2_dir, config_path, None)
