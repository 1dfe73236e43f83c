"""Patches from where users keep them: a set name, a folder, or a list of files, URLs and sets.

A set name (images/patches/ or VMATRIX_PATCHES_DIR) resolves as it always has, so its
cells keep their ids; a per-release set resolves to its variant for the engine's
release (images/recipe.py), and so does a set named in a list. A folder (relative to the matrix file) or a list resolves to
concrete files: a URL is fetched once and cached by content hash under the vmatrix
cache, so a later sweep (or an offline host with a warm cache) uses the same bytes. Each
patch targets one package of site-packages (vLLM or LMCache); a diff's files outside
that package, such as an upstream PR's tests/ and docs/, are left out, and the note says
which. The digest is taken over what is applied, so it is the cell id's content.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from vmatrix.errors import PatchSetError
from vmatrix.images.recipe import files_digest, patch_set_digest, set_content
from vmatrix.orchestrator.paths import cache_dir
from vmatrix.orchestrator.spec.engines import PatchEntry, is_patch_folder

FETCH_TIMEOUT_S = 30


@dataclass(frozen=True)
class ResolvedPatches:
    label: str  # the recipe's `patches`: shown in engine labels, part of the identity
    digest: str
    # (name, file, note) per patch; () for a set name. A set in a list is (its name, "",
    # "patch set"): found by name where the engine is built, like a set name.
    paths: tuple[tuple[str, str, str], ...]


def patch_cache() -> Path:
    return cache_dir() / "patches"


def fetch(url: str) -> Path:
    """The cached copy of URL's content, fetched first if this cache has never seen it."""
    root = patch_cache()
    index_file = root / "urls.json"
    index = json.loads(index_file.read_text()) if index_file.is_file() else {}
    if url in index and (root / index[url]).is_file():
        return root / index[url]
    try:
        # The URL is the user's own patches entry; http(s) only (checked in the spec).
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as resp:
            data = resp.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise PatchSetError(f"{url}: cannot fetch it ({reason}) and no copy is cached under {root}") from None
    name = hashlib.sha256(data).hexdigest()[:16] + ".diff"
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data)
    index[url] = name
    tmp = index_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
    tmp.replace(index_file)
    return root / name


def _sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """A diff split into its preamble and (path after -p1, section text) per file."""
    lines = text.splitlines(keepends=True)
    git = any(ln.startswith("diff --git ") for ln in lines)
    starts = [i for i, ln in enumerate(lines)
              if (ln.startswith("diff ") if git else ln.startswith("--- ") and i + 1 < len(lines)
                  and lines[i + 1].startswith("+++ "))]
    if not starts:
        return text, []
    out = []
    for k, start in enumerate(starts):
        chunk = lines[start:starts[k + 1] if k + 1 < len(starts) else len(lines)]
        path = ""
        for ln in chunk:
            if ln.startswith(("+++ ", "--- ")):
                name = ln[4:].split("\t")[0].strip()
                if name != "/dev/null":
                    path = name.split("/", 1)[1] if "/" in name else name
                    if ln.startswith("+++ "):
                        break
        if not path and git:  # a rename or mode change only: diff --git a/X b/X
            path = chunk[0].split()[-1].split("/", 1)[-1]
        out.append((path, "".join(chunk)))
    return "".join(lines[:starts[0]]), out


def for_target(name: str, data: bytes, target: str) -> tuple[bytes, list[str]]:
    """The diff restricted to files under TARGET/, and the files it left out."""
    preamble, sections = _sections(data.decode("utf-8", errors="surrogateescape"))
    if not sections:
        raise PatchSetError(f"{name}: not a unified diff (no ---/+++ file headers)")
    kept = [body for path, body in sections if path.startswith(f"{target}/")]
    dropped = [path for path, _ in sections if not path.startswith(f"{target}/")]
    if not kept:
        raise PatchSetError(f"{name}: changes no file under {target}/ (it changes {', '.join(dropped[:3])}); "
                            f"give `target:` if it patches another package")
    if not dropped:
        return data, []
    return (preamble + "".join(kept)).encode("utf-8", errors="surrogateescape"), dropped


def _entry_name(entry: PatchEntry) -> str:
    if entry.file:
        return Path(entry.file).name
    return Path(urlparse(entry.url or "").path).name or "patch"


def resolve(patches: str | tuple[PatchEntry, ...], release: str | None = None) -> ResolvedPatches:
    """The files to apply for an engine's ``patches:`` (paths already anchored by load_spec),
    on an engine of RELEASE (which variant a per-release set gives)."""
    if isinstance(patches, str) and not is_patch_folder(patches):
        return ResolvedPatches(patches, patch_set_digest(patches, release), ())
    if isinstance(patches, str):
        folder = Path(patches)
        if not folder.is_dir():
            raise PatchSetError(f"{folder}: no such folder")
        files = sorted(p for p in folder.iterdir() if p.suffix in (".patch", ".diff") and p.is_file())
        if not files:
            raise PatchSetError(f"{folder}: holds no *.patch or *.diff files")
        label = folder.name
        entries = [(f.name, f, "vllm") for f in files]
    else:
        entries: list[tuple[str, Path | None, str]] = []
        for i, entry in enumerate(patches):
            if entry.set is not None:
                entries.append((entry.set, None, "set"))
                continue
            try:
                path = Path(entry.file) if entry.file else fetch(entry.url or "")
            except PatchSetError as exc:
                raise PatchSetError(f"[{i}]: {exc}") from None
            if not path.is_file():
                raise PatchSetError(f"[{i}]: {path}: no such file")
            entries.append((_entry_name(entry), path, entry.target))
        label = "+".join(name for name, _, _ in entries)
    named: list[tuple[str, bytes]] = []
    paths = []
    for i, (name, path, target) in enumerate(entries):
        if path is None:  # a set: its files for this release (or that it has none) are content
            try:
                named += [(f"set {name}: {file}", data) for file, data in set_content(name, release)]
            except PatchSetError as exc:
                raise PatchSetError(f"[{i}]: {exc}") from None
            paths.append((name, "", "patch set"))
            continue
        try:
            data, dropped = for_target(name, path.read_bytes(), target)
        except PatchSetError as exc:
            raise PatchSetError(f"[{i}]: {exc}" if isinstance(patches, tuple) else str(exc)) from None
        note = f"target {target}" + (f"; left out {len(dropped)} file(s) outside {target}/: {', '.join(dropped)}"
                                     if dropped else "")
        if dropped:
            # What is applied is the kept part: write it where the runtimes can read it.
            kept = patch_cache() / "kept" / f"{hashlib.sha256(data).hexdigest()[:16]}-{name}"
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(data)
            path = kept
        # The target is content too: the same diff aimed at another package is another cell.
        named.append((name if target == "vllm" else f"{target}:{name}", data))
        paths.append((f"{label}/{name}", str(path), note))
    return ResolvedPatches(label, files_digest(named), tuple(paths))


_HUNK = re.compile(r"^Hunk #\d+ FAILED at \d+")


def failure_reason(output: str) -> str:
    """The line a failed ``patch --dry-run`` means, with the file it was patching."""
    lines = output.strip().splitlines() or ["patch failed"]
    current = ""
    for i, ln in enumerate(lines):
        if ln.startswith(("checking file ", "patching file ")):
            current = ln.split(" ", 2)[2].strip()
        elif _HUNK.match(ln) or "Reversed" in ln:
            return f"{current}: {ln.strip()}" if current else ln.strip()
        elif "can't find file" in ln:
            # patch echoes the headers it could not place after this line: name the file from them.
            headers = [x[5:].split("\t")[0].strip() for x in lines[i:] if x.startswith(("|+++ ", "|--- "))]
            named = next((h.split("/", 1)[-1] for h in headers if h != "/dev/null"), "")
            return f"{named}: {ln.strip()}" if named else ln.strip()
    keys = ("FAILED", "can't find", "No file", "malformed", "Only garbage")
    return next((ln for ln in lines if any(k in ln for k in keys)), lines[-1]).strip()
