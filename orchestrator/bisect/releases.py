"""Release candidates: the published releases between the two ends, from the package index."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from vmatrix.orchestrator.bisect.errors import BisectError, BisectInputError


def _version(text: str, role: str) -> Version:
    try:
        return Version(text.removeprefix("v"))
    except InvalidVersion:
        raise BisectInputError("{" + role + "}: '{text}' is not a version number", text=text) from None


def release_candidates(
    distribution: str, good: str, bad: str, *, find_fix: bool = False, pre: bool = False,
    known: list[Version] | None = None,
) -> list[str]:
    """Releases from the older endpoint to the newer one, oldest first, both included.

    ``known`` defaults to the package index's list (:func:`orchestrator.stack.versions.releases`);
    pre-releases between the ends are kept only with ``pre`` (an end may be one anyway).
    """
    if known is None:
        from vmatrix.orchestrator.stack.versions import releases

        known = releases(distribution, pre=True)
        if known is None:
            raise BisectError(f"cannot list {distribution} releases: the package index cannot be reached")
    from vmatrix.orchestrator.stack.versions import nearby

    ends = {}
    for role, text in (("good", good), ("bad", bad)):
        v = _version(text, role)
        match = next((k for k in known if k == v), None)
        if match is None:
            close = ", ".join(nearby(str(v), known))
            raise BisectInputError("{" + role + "}: {distribution} has no release {text} (nearby: {close})",
                                   distribution=distribution, text=text, close=close)
        ends[role] = match
    if ends["good"] == ends["bad"]:
        raise BisectInputError("{good} and {bad} are the same release ({release}): nothing to bisect",
                               release=ends["good"])
    if not find_fix and ends["good"] > ends["bad"]:
        raise BisectInputError("{good} {good_end} is newer than {bad} {bad_end}: to find the release that fixed it, "
                               "add {find_fix}", good_end=ends["good"], bad_end=ends["bad"])
    if find_fix and ends["bad"] > ends["good"]:
        raise BisectInputError("{find_fix}: {bad} {bad_end} must be older than {good} {good_end}",
                               good_end=ends["good"], bad_end=ends["bad"])
    old, new = (ends["bad"], ends["good"]) if find_fix else (ends["good"], ends["bad"])
    between = [k for k in known if old < k < new and (pre or not (k.is_prerelease or k.is_devrelease))]
    return [str(v) for v in [old, *sorted(between), new]]

