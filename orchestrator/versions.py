"""Which releases exist: the package index's own list, ordered with packaging.version.

Cached for a day under the cache dir: a plan should not wait on the network, and a
site without an index still plans (the check is then skipped, and an unknown
version fails at install time with the installer's own message).
"""

from __future__ import annotations

import json
import os
import time

import httpx
from packaging.version import InvalidVersion, Version

from orchestrator.paths import cache_dir

INDEX = os.environ.get("VMATRIX_INDEX_URL", "https://pypi.org/simple")
_TTL_S = 24 * 3600


def releases(distribution: str, pre: bool = False) -> list[Version] | None:
    """All releases of ``distribution`` in order, or None if the index cannot be reached."""
    cache = cache_dir() / "index" / f"{distribution}.json"
    raw: list[str] | None = None
    if cache.is_file() and time.time() - cache.stat().st_mtime < _TTL_S:
        raw = json.loads(cache.read_text())
    if raw is None:
        try:
            resp = httpx.get(f"{INDEX}/{distribution}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"},
                             timeout=20, follow_redirects=True)
            resp.raise_for_status()
            raw = resp.json()["versions"]
        except (httpx.HTTPError, KeyError, ValueError):
            return None
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(raw))
    out = []
    for text in raw:
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        if pre or not (v.is_prerelease or v.is_devrelease):
            out.append(v)
    return sorted(out)


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
        return f"'{version}' is not a version number (latest {distribution}: {known[-1]})"
    return f"{distribution} has no release {version} (nearby: {', '.join(nearby(version, known))})"
