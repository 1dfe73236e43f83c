"""The bisect's errors: one line for the user, raised before any engine starts where possible."""

from __future__ import annotations

from collections.abc import Callable
from string import Formatter
from typing import Any


class BisectError(ValueError):
    """A bisect that cannot start or cannot conclude; the message is one line for the user."""


class BisectInputError(BisectError):
    """One or more of the bisect's inputs are wrong, and the message says which.

    ``template`` names inputs by their :class:`~orchestrator.bisect.run.BisectRequest`
    field, as placeholders (``"{good}: vllm has no release {release}"``); ``values``
    fill the other placeholders. ``str()`` spells an input as its field name
    (``good: vllm has no release 9.9``); a front end spells it its own way with
    :meth:`spelled` (the CLI: ``--good: ...``). Literal braces are doubled.
    """

    def __init__(self, template: str, /, **values: object) -> None:
        self.template = template
        self.values = values
        names = {name for _, name, _, _ in Formatter().parse(template) if name}
        self.inputs = tuple(sorted(names - values.keys()))
        super().__init__(self.spelled(str))

    def spelled(self, spell: Callable[[str], str]) -> str:
        """The message with every input named ``spell(field)``."""
        return self.template.format(**self.values, **{name: spell(name) for name in self.inputs})

    def __reduce__(self) -> tuple[Any, ...]:  # pickle (a process pool) rebuilds it from template and values
        return _rebuild, (type(self), self.template, self.values)


def _rebuild(cls: type[BisectInputError], template: str, values: dict[str, object]) -> BisectInputError:
    return cls(template, **values)
