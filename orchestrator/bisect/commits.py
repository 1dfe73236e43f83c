"""Commit candidates: first-parent commits of a vLLM clone, and the wheel each one installs from."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

from packaging.version import InvalidVersion, Version

from vmatrix.images.recipe import wheel_path
from vmatrix.orchestrator.bisect.errors import BisectError, BisectInputError
from vmatrix.recipe import EngineRecipe

# vLLM's per-commit wheel of a main-branch commit (CUDA build), under the fixed
# placeholder file name vLLM's install docs give pip users. Newer commits are also
# published as a per-commit package index (https://wheels.vllm.ai/<commit>/<variant>,
# variant cu129, cu130 or cpu) whose file names carry a version no template can guess:
# for those, fill a wheelhouse (docs/BISECT.md, 'Commit mode') and pass its folder.
DEFAULT_WHEEL_URL = "https://wheels.vllm.ai/{commit}/vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl"


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def resolve_ref(repo: Path, ref: str, role: str) -> str:
    """A tag, branch or commit to its full hash; ``0.31.0`` also finds vLLM's tag ``v0.31.0``."""
    tries = [ref] + ([f"v{ref}"] if not ref.startswith("v") else [])
    for name in tries:
        out = git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
        if out.returncode == 0:
            return out.stdout.strip()
    raise BisectInputError("{" + role + "}: no tag or commit '{ref}' in {path}", ref=ref, path=repo)


def commit_candidates(repo: Path, good: str, bad: str, *, find_fix: bool = False) -> list[str]:
    """Full hashes from the older endpoint to the newer, first-parent order, both included.

    First-parent: the commits of the branch itself (each merged PR once), which is what
    vLLM publishes per-commit wheels for; commits inside merged side branches are not
    candidates.
    """
    if not (repo / ".git").exists() and git(repo, "rev-parse", "--git-dir").returncode != 0:
        raise BisectInputError("{repo}: {path} is not a git clone", path=repo)
    typed = {"good": good, "bad": bad}
    ends = {"good": resolve_ref(repo, good, "good"), "bad": resolve_ref(repo, bad, "bad")}
    if ends["good"] == ends["bad"]:
        raise BisectInputError("{good} and {bad} are the same commit ({commit}): nothing to bisect",
                               commit=ends["good"][:12])
    old_role, new_role = ("bad", "good") if find_fix else ("good", "bad")
    old, new = ends[old_role], ends[new_role]
    if git(repo, "merge-base", "--is-ancestor", old, new).returncode != 0:
        hint = " (to find a fix, add {find_fix})" if not find_fix and \
            git(repo, "merge-base", "--is-ancestor", new, old).returncode == 0 else ""
        raise BisectInputError("{" + old_role + "} {old} is not an ancestor of {" + new_role + "} {new}" + hint,
                               old=typed[old_role], new=typed[new_role])
    out = git(repo, "rev-list", "--first-parent", "--reverse", f"{old}..{new}")
    if out.returncode != 0:
        raise BisectError(f"git rev-list failed in {repo}: {out.stderr.strip().splitlines()[-1:]}")
    after = out.stdout.split()
    if not after or after[-1] != new:
        raise BisectInputError("{" + new_role + "} is not on the first-parent line after {" + old_role + "} in {path}",
                               path=repo)
    return [old, *after]


def commit_version(repo: Path, commit: str, fallback: str) -> str:
    """The release a commit builds on: its newest reachable ``vX.Y.Z`` tag, without the ``v``.

    ``fallback`` (the matrix's engine version) when no such tag is reachable. It fills
    the ``{version}`` placeholder of ``wheel_url`` and is the version engine flags are
    chosen for (they depend on the release line, engine_args.py).
    """
    out = git(repo, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", commit)
    tag = out.stdout.strip().removeprefix("v") if out.returncode == 0 else ""
    try:
        return str(Version(tag)) if tag else fallback
    except InvalidVersion:
        return fallback


def wheel_for(commit: str, wheel_url: str | None, version: str = "") -> str | None:
    """Where the wheel of ``commit`` is: a URL or file from a template, or a wheelhouse file.

    A template holds ``{commit}`` (full hash) and may hold ``{version}``
    (:func:`commit_version`); expanded to a local folder it means the one wheel in that
    folder. A folder without placeholders is a wheelhouse holding ``<commit>/*.whl``
    (the layout of wheels.vllm.ai) or wheels whose file name contains the commit's
    first 7 to 40 hex digits. None: no wheel for this commit, locally (the step is
    skipped, as vLLM does not publish a wheel for every commit either). A remote URL
    is not probed: a missing one fails the install, which is a skip too.
    """
    location = wheel_url or DEFAULT_WHEEL_URL
    if "{commit}" in location:
        try:
            where = location.format(commit=commit, version=version)
        except (KeyError, IndexError, ValueError) as exc:
            raise BisectInputError("{wheel_url}: '{location}': only {{commit}} and {{version}} can be filled in "
                                   "({error})", location=location, error=f"{type(exc).__name__}: {exc}") from None
        local = wheel_path(where)
        if local is None:
            return where
        if local.is_dir():
            found = sorted(local.glob("*.whl"))
            return str(found[0].resolve()) if len(found) == 1 else None
        return where if local.is_file() else None
    folder = Path(location).expanduser()
    if not folder.is_dir():
        raise BisectInputError("{wheel_url}: '{location}' is neither a template with {{commit}} nor a folder",
                               location=location)
    nested = sorted((folder / commit).glob("*.whl"))
    if nested:
        return str(nested[0].resolve())
    for whl in sorted(folder.glob("*.whl")):
        if any(commit[:n] in whl.name for n in (40, 12, 10, 9, 8, 7)):
            return str(whl.resolve())
    return None


def commit_recipe(base: EngineRecipe, commit: str, wheel: str, version: str) -> EngineRecipe:
    """The engine recipe that installs ``commit``'s wheel instead of a release.

    ``vllm`` becomes ``<version>+g<hash12>``: a valid version (engine flags are chosen by
    it) that still names the commit in labels and in the results table.
    """
    return replace(base, vllm=f"{version}+g{commit[:12]}", wheel=wheel)

