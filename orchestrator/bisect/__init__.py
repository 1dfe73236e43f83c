"""Bisect a behaviour change of one matrix cell between two vLLM releases, or commits.

One module per step, imported one way (each only from those above it here):

- :mod:`.errors`: :class:`BisectError`, and :class:`BisectInputError` for a wrong input;
- :mod:`.predicate`: what makes a step bad, and the :class:`Observation` it judges;
- :mod:`.search`: the engine-free search (endpoints, then binary, with skips);
- :mod:`.releases`, :mod:`.commits`: the candidates (PyPI releases; a clone's commits and their wheels);
- :mod:`.selector`: the cell a selector names, and the engine every step keeps;
- :mod:`.evaluate`: a step as a sweep of that cell, observed from the results DB;
- :mod:`.report`: what was found, as values and plain text;
- :mod:`.run`: the whole bisect, wiring the rest.

Text for the terminal (tables, progress, which flag an error is about) is the CLI's:
:mod:`orchestrator.cli.bisect`.
"""

from vmatrix.orchestrator.bisect.errors import BisectError, BisectInputError
from vmatrix.orchestrator.bisect.report import BisectReport
from vmatrix.orchestrator.bisect.run import BisectRequest, run_bisect
from vmatrix.orchestrator.bisect.search import Step

__all__ = ["BisectError", "BisectInputError", "BisectReport", "BisectRequest", "Step", "run_bisect"]
