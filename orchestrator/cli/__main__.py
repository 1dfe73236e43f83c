"""``python -m orchestrator.cli``: the same as the ``vmatrix`` console script."""

from orchestrator.cli import main

main()
