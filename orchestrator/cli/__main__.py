"""``python -m vmatrix.orchestrator.cli``: the same as the ``vmatrix`` console script."""

from vmatrix.orchestrator.cli import main

main()
