"""Release candidates: the published releases between the two ends, from the package index."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from orchestrator.bisect.errors import BisectError


def _version(text: str, role: str) -> Version:
    try:
        return Version(text.removeprefix("v"))
    except InvalidVersion:
        raise BisectError(f"--{role}: '{text}' is not a version number") from None


def release_candidates(
    distribution: str, good: str, bad: str, *, find_fix: bool = False, pre: bool = False,
    known: list[Version] | None = None,
) -> list[str]:
    """Releases from the older endpoint to the newer one, oldest first, both included.

    ``known`` defaults to the package index's list (:func:`orchestrator.versions.releases`);
    pre-releases between the ends are kept only with ``pre`` (an end may be one anyway).
    """
    if known is None:
        from orchestrator.versions import releases

        known = releases(distribution, pre=True)
        if known is None:
            raise BisectError(f"cannot list {distribution} releases: the package index cannot be reached")
    from orchestrator.versions import nearby

    ends = {}
    for role, text in (("good", good), ("bad", bad)):
        v = _version(text, role)
        match = next((k for k in known if k == v), None)
        if match is None:
            close = ", ".join(nearby(str(v), known))
            raise BisectError(f"--{role}: {distribution} has no release {text} (nearby: {close})")
        ends[role] = match
    if ends["good"] == ends["bad"]:
        raise BisectError(f"--good and --bad are the same release ({ends['good']}): nothing to bisect")
    if not find_fix and ends["good"] > ends["bad"]:
        raise BisectError(
            f"--good {ends['good']} is newer than --bad {ends['bad']}: "
            "to find the release that fixed it, add --find-fix"
        )
    if find_fix and ends["bad"] > ends["good"]:
        raise BisectError(f"--find-fix: --bad {ends['bad']} must be older than --good {ends['good']}")
    old, new = (ends["bad"], ends["good"]) if find_fix else (ends["good"], ends["bad"])
    between = [k for k in known if old < k < new and (pre or not (k.is_prerelease or k.is_devrelease))]
    return [str(v) for v in [old, *sorted(between), new]]

