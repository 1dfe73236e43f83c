"""Which releases exist, as pip sees them, and what a release range in a matrix means today.

The list comes from ``pip index versions``: the index pip is configured with (its
``index-url``, ``extra-index-url`` and ``find-links``, as an install would see them: what
cannot be installed here, a wheel for another platform or Python, is not listed), or
``index_url`` for a mirror. pip reads the index (PEP 503 HTML or PEP 691 JSON, a
``file://`` folder, credentials, proxies, yanked releases); nothing here parses an index.

Cached under the cache dir. An exact version is checked against a list up to a day old:
a plan should not wait on the network, and a site without an index still plans (the
check is then skipped, and an unknown version fails at install time with the
installer's own message). A range is resolved against a fresh list: that is what it is
for; the cached one stands in only while the index cannot be reached.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from vmatrix.orchestrator.paths import cache_dir

# The index a release list is read from when no index_url is given: pip's own
# configuration, unless VMATRIX_INDEX_URL names one (also what engine installs then use).
INDEX_ENV = "VMATRIX_INDEX_URL"
_TTL_S = 24 * 3600
LATEST = "latest"
# What pip prints when an index could not be read at all (as opposed to "no such project").
_UNREACHABLE = re.compile(r"Retrying \(|Could not fetch URL|NewConnectionError|ConnectTimeout|Max retries exceeded")


@dataclass(frozen=True)
class Listing:
    """A distribution's releases on one index, and when that list was read."""

    versions: list[Version]  # oldest first, pre-releases included
    read_at: float
    index: str  # the index_url asked, or "" for pip's configuration
    cached: bool  # read from the cache, not from the index now

    def releases(self, pre: bool = False) -> list[Version]:
        return [v for v in self.versions if pre or not (v.is_prerelease or v.is_devrelease)]


def default_index() -> str | None:
    return os.environ.get(INDEX_ENV) or None


def _pip_versions(distribution: str, index_url: str | None) -> list[str] | None:
    """The versions pip can install of ``distribution``; [] if the index has none; None if
    it could not be read."""
    argv = [sys.executable, "-m", "pip", "index", "versions", distribution, "--pre", "--no-input",
            "--disable-pip-version-check", "--timeout", "20", "--retries", "1"]
    if index_url:
        argv += ["--index-url", index_url]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None if _UNREACHABLE.search(done.stderr + done.stdout) else []
    line = next((x for x in done.stdout.splitlines() if x.startswith("Available versions:")), None)
    return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()] if line is not None else []


def _cache_file(distribution: str, index_url: str | None) -> Path:
    key = hashlib.sha256((index_url or "pip-configured").encode()).hexdigest()[:12]
    return cache_dir() / "index" / "pip" / f"{key}-{distribution}.json"


def listing(distribution: str, index_url: str | None = None, max_age_s: float = _TTL_S) -> Listing | None:
    """``distribution``'s releases on ``index_url`` (default: VMATRIX_INDEX_URL, else pip's
    configuration), read again when the cached list is older than ``max_age_s`` (0: always);
    None if the index cannot be read and nothing was cached."""
    index_url = index_url or default_index()
    cache = _cache_file(distribution, index_url)
    cached = json.loads(cache.read_text()) if cache.is_file() else None
    if cached is not None and time.time() - cached["read_at"] < max_age_s:
        return _listing(cached, index_url, True)
    raw = _pip_versions(distribution, index_url)
    if raw is None:
        return _listing(cached, index_url, True) if cached is not None else None
    fresh = {"versions": raw, "read_at": time.time()}
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(fresh))
    tmp.replace(cache)  # atomic: other sessions read this cache at the same time
    return _listing(fresh, index_url, False)


def _listing(data: dict, index_url: str | None, cached: bool) -> Listing:
    out = []
    for text in data["versions"]:
        try:
            out.append(Version(text))
        except InvalidVersion:
            continue
    return Listing(sorted(set(out)), data["read_at"], index_url or "", cached)


def releases(distribution: str, pre: bool = False, index_url: str | None = None) -> list[Version] | None:
    """All releases of ``distribution`` in order, or None if the index cannot be reached."""
    found = listing(distribution, index_url)
    return found.releases(pre) if found is not None else None


def nearby(version: str, known: list[Version], n: int = 2) -> list[str]:
    """The releases just below and above ``version``: what the user probably meant."""
    try:
        target = Version(version)
    except InvalidVersion:
        return [str(v) for v in known[-n * 2:]]
    below = [v for v in known if v < target][-n:]
    above = [v for v in known if v > target][:n]
    return [str(v) for v in below + above]


def check_version(distribution: str, version: str) -> str | None:
    """None if the release exists (or the index is unreachable), else a one-line error."""
    known = releases(distribution, pre=True)
    if known is None:
        return None
    try:
        if Version(version) in known:
            return None
    except InvalidVersion:
        return f"'{version}' is not a version number (latest {distribution}: {known[-1] if known else 'none'})"
    if not known:
        return f"the package index has no {distribution}"
    return f"{distribution} has no release {version} (nearby: {', '.join(nearby(version, known))})"


# --- release ranges -----------------------------------------------------------------------


def release_choice(text: str) -> Version | SpecifierSet | str:
    """What a matrix's version field says: one release (a Version), ``latest``, or a range
    (a PEP 440 specifier set such as ``>=0.30`` or ``>=0.31,<=0.32.0``). ValueError
    otherwise, with the line the user reads."""
    text = text.strip()
    if text == LATEST:
        return LATEST
    try:
        return Version(text)
    except InvalidVersion:
        pass
    try:
        spec = SpecifierSet(text)
    except InvalidSpecifier:
        spec = None
    if not spec:
        raise ValueError(f"'{text}' is neither a release (0.32.0), `latest` nor a release range (>=0.30, "
                         f">=0.31,<=0.32.0)")
    return spec


def is_range(text: str | None) -> bool:
    """Whether a version field names a range or `latest`, to be resolved against the index."""
    return text is not None and not isinstance(release_choice(text), Version)


def in_range(choice: SpecifierSet | str, known: list[Version]) -> list[Version]:
    """The releases a range or `latest` stands for, oldest first. Pre-releases only where the
    range names one itself (``>=0.33.0rc1``), as pip decides."""
    final = [v for v in known if not (v.is_prerelease or v.is_devrelease)]
    if isinstance(choice, str):  # LATEST
        return final[-1:]
    return sorted(choice.filter(known))
