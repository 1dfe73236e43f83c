"""The bisect's errors, from the one error tree (:mod:`vmatrix.errors`).

:class:`BisectInputError` names inputs by their :class:`~orchestrator.bisect.run.BisectRequest`
field (``BisectInputError("{good}: vllm has no release {release}", release=...)``);
the CLI spells them as its flags (``--good: ...``).
"""

from vmatrix.errors import BisectError, BisectInputError

__all__ = ["BisectError", "BisectInputError"]
