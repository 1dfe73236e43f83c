"""The ``docker import`` of a root folder (images.base.import_rootfs), on the real daemon.

build_base reaches the import only when its tag is missing, so a machine that has the
base image never runs it (issue 21: the import was broken and CI stayed green). This
imports a root of one text file through the same function on every run: seconds.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import pytest

from vmatrix.images.base import import_rootfs
from vmatrix.images.build import ImageBuildError, client

try:
    DOCKER = client()
except ImageBuildError as exc:
    DOCKER = None
    WHY = str(exc)

pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(DOCKER is None, reason=f"no Docker daemon: {WHY if DOCKER is None else ''}")]


def test_import_rootfs_makes_an_image_with_the_files_and_changes(tmp_path: Path) -> None:
    import docker

    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    text = f"imported {uuid.uuid4().hex}\n"
    (root / "etc" / "greeting").write_text(text)
    tag = f"vmatrix/test-import:{uuid.uuid4().hex[:12]}"
    try:
        image_id = import_rootfs(DOCKER, root, tag, changes=['CMD ["cat", "/etc/greeting"]', "ENV LANG=C.UTF-8"])

        image = DOCKER.images.get(tag)
        assert image.id == image_id
        config = DOCKER.api.inspect_image(tag)["Config"]
        assert config["Cmd"] == ["cat", "/etc/greeting"]
        assert "LANG=C.UTF-8" in config["Env"]
        # The root has no binaries to run, but a created (never started) container
        # hands its files back: the file is in the image, not just a tag on nothing.
        container = DOCKER.containers.create(tag)
        try:
            stream, _ = container.get_archive("/etc/greeting")
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                assert tar.extractfile("greeting").read().decode() == text
        finally:
            container.remove(force=True)
    finally:
        try:
            DOCKER.images.remove(tag, force=True)
        except docker.errors.ImageNotFound:
            pass
    with pytest.raises(docker.errors.ImageNotFound):
        DOCKER.images.get(tag)
