"""The ``vmatrix`` command line, apart from the library it drives (as guidellm keeps ``cli/``).

One module per command group, with the views that draw its output for a person beside it:
``app`` (the root: sweep, canary, results ls/show/table), ``results`` (compare, export,
diff, report, publish), ``bisect``, ``watch``, ``images``, ``traces``, ``noise``, ``regrade``; ``common``
(consoles, --db, one-line errors); ``*_view`` (Rich renderings). Nothing below
``orchestrator.cli`` imports it.
"""

from vmatrix.orchestrator.cli.app import app, main

__all__ = ["app", "main"]
