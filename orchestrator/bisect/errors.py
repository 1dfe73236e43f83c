"""The bisect's errors: one line for the user, raised before any engine starts where possible."""

from __future__ import annotations


class BisectError(ValueError):
    """A bisect that cannot start or cannot conclude; the message is one line for the user."""
