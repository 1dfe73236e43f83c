"""The Docker runtime: one image per engine recipe, engines as containers.

Same shape as the local runtime (``ensure_image`` ~ ``ensure_env``, ``EngineContainer``
~ ``EngineProcess``), so running a cell does not care which one it has. A container
publishes its port on 127.0.0.1 only, sees exactly the GPUs Ray gave the task, mounts
the model and the HF cache read-only, and carries labels naming sweep, cell and owner:
the owner (host + orchestrator pid) lets :func:`reap_containers` remove containers
whose orchestrator was killed before it could remove them itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from filelock import FileLock

from vmatrix.errors import EnvBuildError, ImageBuildError
from vmatrix.images.build import BuiltImage, ImageOptions, build_image, client, image_packages
from vmatrix.images.recipe import recipe_patches
from vmatrix.orchestrator.paths import cache_dir
from vmatrix.orchestrator.runtimes.affinity import format_cpulist
from vmatrix.orchestrator.runtimes.engine import EngineEnvironment, owner_gone, owner_id, say_if_locked, wait_healthy
from vmatrix.orchestrator.runtimes.signature import error_signature
from vmatrix.orchestrator.stack.engine_args import engine_argv
from vmatrix.progress import IMAGE, StepReport
from vmatrix.recipe import EngineRecipe

if TYPE_CHECKING:
    from vmatrix.orchestrator.runtimes.interface import EngineStart

LABEL_SWEEP = "vmatrix.sweep"
LABEL_CELL = "vmatrix.cell"
LABEL_OWNER = "vmatrix.owner"
LABEL_NODE = "vmatrix.node"  # the Ray node of the attempt that started it
CONTAINER_PORT = 8000


@dataclass(frozen=True)
class EngineImage:
    tag: str
    python: Path  # the engine's interpreter inside the image
    fingerprint: dict[str, Any]
    built: bool


def ensure_image(recipe: EngineRecipe, options: ImageOptions | None, log: Path,
                 progress: StepReport | None = None) -> EngineImage:
    """The recipe's image, built first if the daemon lacks it (its build steps to ``progress``).

    A file lock per recipe makes the cells of one recipe wait for one build instead
    of each sending the same context to the daemon.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    path = cache_dir() / "images" / f"{recipe.env_id}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    say_if_locked(lock, progress, IMAGE, f"waiting for another build of {recipe.label}")
    with lock:
        image: BuiltImage = build_image(recipe, options, log=log, progress=progress)
        packages = image_packages(image.tag)
    patches = [
        {"file": name, "sha256": hashlib.sha256(f.read_bytes()).hexdigest(), **({"note": note} if note else {})}
        for name, f, note in recipe_patches(recipe)
    ]
    fingerprint = {
        "recipe": recipe.label,
        "env_id": recipe.env_id,
        "runtime": "docker",
        "image": image.tag,
        "image_id": image.image_id,
        "packages": packages,
        "patches": patches,
    }
    return EngineImage(image.tag, Path(image.python), fingerprint, image.built)


def owner_label() -> str:
    return owner_id()


def reap_containers(docker_client: Any = None) -> list[str]:
    """Remove vmatrix engine containers whose owner on this host is gone; returns their names.

    Containers of owners on other hosts, or in another pid namespace of this one (a
    Compose node, the host seen from a node), are left alone: their pid means nothing
    here. A daemon is shared by all of them, so "not mine to judge" must mean "keep".
    """
    try:
        c = docker_client or client()
    except ImageBuildError:
        return []  # no daemon, no containers
    removed = []
    for container in c.containers.list(all=True, filters={"label": LABEL_OWNER}):
        owner = container.labels.get(LABEL_OWNER, "")
        if ":" not in owner or not owner_gone(owner):
            continue
        with contextlib.suppress(Exception):  # already gone, or being removed by someone else
            container.remove(force=True)
            removed.append(container.name)
    return removed


def remove_attempts(sweep: str, owner: str, cell: str | None = None, node: str | None = None,
                    docker_client: Any = None) -> list[tuple[str, str]]:
    """Remove the engine containers of one driver's sweep (of one cell of it); returns (cell, name) each.

    An engine belongs to the attempt that started it, but when that attempt's node is
    lost (a worker container killed) nothing of the attempt is left to stop it, and the
    reapers cannot judge it: its owner label names the driver, which is alive. Ray
    starts a cell's next attempt only after the previous one is gone, so a container of
    the same sweep, driver and cell found then is the lost attempt's; at the sweep's end
    every container still labelled with it is. Only this daemon's are reached: an
    engine on a lost host's own daemon stays there (docs/cluster.md).
    """
    try:
        c = docker_client or client()
    except ImageBuildError:
        return []
    labels = [f"{LABEL_SWEEP}={sweep}", f"{LABEL_OWNER}={owner}"] + ([f"{LABEL_CELL}={cell}"] if cell else []) \
        + ([f"{LABEL_NODE}={node}"] if node else [])
    removed = []
    for container in c.containers.list(all=True, filters={"label": labels}):
        with contextlib.suppress(Exception):  # already gone, or being removed by someone else
            container.remove(force=True)
            removed.append((container.labels.get(LABEL_CELL, ""), container.name))
    return removed


@dataclass
class EngineContainer:
    """A vLLM server in a container; teardown removes the container on every path."""

    image: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    port: int  # on the host, bound to 127.0.0.1
    labels: dict[str, str]
    mounts: list[str] = field(default_factory=list)  # host paths, mounted read-only at the same path
    gpu_ids: list[str] = field(default_factory=list)  # Ray's ids; empty: no GPU device request
    shm_size: str = "2g"
    cpus: tuple[int, ...] = ()  # --cpuset-cpus (runtimes/affinity.py); () = all
    container: Any = None
    returncode: int | None = None
    _pump: threading.Thread | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        import docker

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as fh:
            fh.write(f"$ docker run {self.image} " + " ".join(self.argv) + "\n")
        c = client()
        requests = []
        if self.gpu_ids:
            requests = [docker.types.DeviceRequest(device_ids=list(self.gpu_ids), capabilities=[["gpu"]])]
        try:
            self.container = c.containers.run(
                self.image,
                command=self.argv,
                detach=True,
                environment=self.env,
                ports={f"{CONTAINER_PORT}/tcp": ("127.0.0.1", self.port)},
                volumes={p: {"bind": p, "mode": "ro"} for p in self.mounts},
                device_requests=requests,
                shm_size=self.shm_size,
                labels={LABEL_OWNER: owner_label(), **self.labels},
                name=f"vmatrix-{self.labels.get(LABEL_CELL, 'engine')[:12]}-{self.port}",
                ipc_mode="private",
                **({"cpuset_cpus": format_cpulist(self.cpus)} if self.cpus else {}),
            )
        except docker.errors.APIError as exc:
            # Recorded as the engine's failure to start, in the daemon's words.
            with self.log_path.open("a") as fh:
                fh.write(f"DockerError: {exc.explanation or exc}\n")
            self.container = None
            return
        self._pump = threading.Thread(target=self._copy_logs, daemon=True)
        self._pump.start()

    def _copy_logs(self) -> None:
        # Followed log stream -> the cell's log file, so signature() reads it like the local one.
        with contextlib.suppress(Exception), self.log_path.open("ab") as fh:  # the container went away: the stream ends
            for chunk in self.container.logs(stream=True, follow=True):
                fh.write(chunk)
                fh.flush()

    def _refresh(self) -> str:
        try:
            self.container.reload()
        except Exception:  # noqa: BLE001 - removed under us
            return "removed"
        state = self.container.attrs.get("State", {})
        if state.get("Status") in ("exited", "dead"):
            code = state.get("ExitCode")
            # 128+N is how a container reports death by signal N; say it like Popen does.
            self.returncode = -(code - 128) if code is not None and code > 128 else code
        return state.get("Status", "unknown")

    def alive(self) -> bool:
        return self.container is not None and self._refresh() in ("created", "running", "restarting")

    def wait_ready(self, timeout_s: float, companions: tuple[Any, ...] = (),
                   on_poll: Callable[[], None] | None = None) -> str:
        """'ready', 'exited', 'companion_exited' (a sidecar it needs died) or 'timeout'."""
        state = wait_healthy(f"{self.base_url}/health", self.alive, companions, timeout_s, on_poll)
        if state == "exited":
            self._drain()  # the container's last log lines carry its signature
        return state

    def _drain(self) -> None:
        if self._pump is not None:
            self._pump.join(timeout=5)

    def stop(self, grace_s: float = 15) -> None:
        if self.container is None:
            return
        try:
            with contextlib.suppress(Exception):  # whatever happened, the container must go
                if self._refresh() == "running":
                    self.container.stop(timeout=int(grace_s))
                self._refresh()
                self._drain()
        finally:
            with contextlib.suppress(Exception):  # already removed
                self.container.remove(force=True)

    def owns(self, pid: int) -> bool:
        return False  # a container's engine never holds the GPU's gate itself (DockerRuntime.cannot_gate_in_engine)

    def signature(self) -> str | None:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return error_signature(text, self.returncode)


def _hf_cache() -> list[str]:
    home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    return [home] if os.path.isdir(home) else []


@dataclass(frozen=True)
class DockerRuntime:
    """Engine environments as images on the daemon, engines as sibling containers."""

    images: ImageOptions | None = None  # how images are built
    sweep: str = ""  # the sweep id, as a container label
    owner: str = ""
    name: ClassVar[str] = "docker"
    building: ClassVar[str] = "building image"

    def environment(self, recipe: EngineRecipe, log_dir: Path, progress: StepReport | None = None) -> EngineImage:
        reap_containers()  # containers of a killed attempt of this (or any) cell on this host
        return ensure_image(recipe, self.images, log_dir / f"image-{recipe.env_id}.log", progress)

    def reap(self) -> list[str]:
        return reap_containers()

    def remove_lost_attempts(self, cell_id: str | None = None, node: str | None = None) -> list[tuple[str, str]]:
        if not (self.sweep and self.owner):
            return []
        return remove_attempts(self.sweep, self.owner, cell_id, node=node)

    def cannot_gate_in_engine(self, env: EngineEnvironment) -> str | None:
        # The hook and the gate's files live on the orchestrator's node; a container sees
        # neither (and this node's paths are not the daemon's, canary.on_host_path).
        return "the engine runs in a container, which sees neither the hook nor the gate's files"

    def engine(self, env: EngineEnvironment, start: EngineStart) -> tuple[EngineContainer, None]:
        cell = start.cell
        if cell.knobs.get("lmcache_connector"):
            raise EnvBuildError("LMCache cells need runtime: local (the LMCache server runs as a local process)")
        assert isinstance(env, EngineImage)
        import ray

        from vmatrix.orchestrator.plan.canary import draft_dir, is_canary, on_host_path

        self.remove_lost_attempts(cell.id)  # a lost node's attempt of this cell
        # The daemon mounts host paths, not this node's.
        model = on_host_path(cell.model.path) if is_canary(cell.model.name) else cell.model.path
        draft = draft_dir(cell.knobs)
        drafter = on_host_path(str(draft)) if draft else None
        argv = engine_argv(env.python, cell.engine, cell.knobs, model, CONTAINER_PORT, host="0.0.0.0",
                           draft_model=drafter, memory_share=start.memory_share)
        labels = {LABEL_SWEEP: self.sweep, LABEL_CELL: cell.id} | ({LABEL_OWNER: self.owner} if self.owner else {}) \
            | ({LABEL_NODE: ray.get_runtime_context().get_node_id()} if ray.is_initialized() else {})
        engine = EngineContainer(
            image=env.tag, argv=argv, env=dict(start.env), log_path=start.log_path, port=start.port, cpus=start.cpus,
            labels=labels, mounts=[model, *([drafter] if drafter else []), *_hf_cache()],
            # CPU engines take no device request, even when Ray hands out logical GPUs.
            gpu_ids=start.gpu_ids if cell.engine.accelerator == "cuda" else [],
        )
        return engine, None
