"""Every error vmatrix raises on purpose, in one tree (the shape of httpx's).

```
VmatrixError                  str() is one line for the user; never a traceback
├── InputError (ValueError)   a value the user gave is wrong; names it by field
│   ├── SpecError             a matrix file (file, line, field)
│   ├── TraceError            a trace file (FILE:LINE: problem)
│   ├── PatchSetError         a patch set that does not exist or holds nothing
│   ├── CanaryError           a canary that cannot be resolved or built
│   ├── StoreError            a results database that cannot be opened
│   ├── MergeError            results DBs that cannot be merged (a cell stored with two specs)
│   ├── NotFoundError         (also LookupError) no recorded cell, run or sweep by that id
│   └── BisectError           a bisect that cannot start or conclude
│       └── BisectInputError  ... because of one of its inputs
├── BuildError (RuntimeError) an engine environment cannot be built
│   ├── EnvBuildError         a venv (local runtime)
│   └── ImageBuildError       an image (docker runtime)
├── SweepError (RuntimeError) the sweep cannot start at all (a failing cell is a result, not this)
├── GateError (RuntimeError)  an engine that cannot hold a gated phase (no scheduler pause)
└── ExportError (RuntimeError) an export that cannot be written
```

Library code names the inputs an error is about by their field names (``db``,
``cell``, ``good``); a front end spells them its own way with
:meth:`VmatrixError.spelled` (the CLI: ``--db``), once, for every error
(``orchestrator.cli.common.error_line``). The built-in
bases stay so that callers that catch ``ValueError``/``LookupError`` keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from string import Formatter
from typing import Any


class VmatrixError(Exception):
    """Base of the tree. ``VmatrixError(message)`` is a plain one-line message.

    With values (``StoreError("{db} {url!r}: not a SQLAlchemy URL", url=url)``), made by
    :meth:`naming`, or on a class that sets ``names_inputs``, the message is a template: its placeholders that
    ``values`` do not fill are the inputs it is about, by field name. ``str()`` spells
    an input as its field name (``db 'x': ...``); a front end spells it its own way with
    :meth:`spelled`. Literal braces in a template are doubled.
    """

    names_inputs = False

    def __init__(self, message: str, /, **values: object) -> None:
        self._set(message, values, bool(values) or self.names_inputs)

    @classmethod
    def naming(cls, template: str, /, **values: object) -> VmatrixError:
        """An error whose message is a template even without values (``"{cell}: empty"``)."""
        exc = cls.__new__(cls)
        exc._set(template, values, True)
        return exc

    def _set(self, message: str, values: dict[str, object], is_template: bool) -> None:
        self.message = message
        self.template: str | None = message if is_template else None
        self.values = values
        self.inputs: tuple[str, ...] = ()
        if self.template is not None:
            names = {name for _, name, _, _ in Formatter().parse(self.template) if name}
            self.inputs = tuple(sorted(names - values.keys()))
        Exception.__init__(self, self.spelled(str))

    def spelled(self, spell: Callable[[str], str]) -> str:
        """The message with every input it names spelled ``spell(field)``."""
        if self.template is None:
            return self.message
        return self.template.format(**self.values, **{name: spell(name) for name in self.inputs})

    def __reduce__(self) -> tuple[Any, ...]:  # pickle (Ray, a process pool) keeps the named inputs
        return _rebuild, (type(self), self.template or str(self), self.values, self.template is not None)


def _rebuild(cls: type[VmatrixError], message: str, values: dict[str, object], is_template: bool) -> VmatrixError:
    exc = cls.__new__(cls)
    exc._set(message, values, is_template)
    return exc


class InputError(VmatrixError, ValueError):
    """A value the user gave (a file, an option, a field) is wrong; the message says which."""


class SpecError(InputError):
    """A matrix file that cannot be used; the message is one line naming file, line and field."""


class TraceError(InputError):
    """A trace that cannot be used; the message is one line: ``FILE:LINE: problem``."""


class PatchSetError(InputError):
    """A patch set that does not exist or holds no patches."""


class CanaryError(InputError):
    """A canary model that cannot be resolved, built or verified."""


class StoreError(InputError):
    """The results database cannot be opened; the message is one line naming it."""


class MergeError(InputError):
    """Results DBs that cannot be merged (``db/merge.py``): one line naming the cell and the
    inputs it is about (the source ``src``, the destination ``db``)."""


class NotFoundError(InputError, LookupError):
    """Nothing recorded by that id (cell id prefix, run, sweep)."""


class BisectError(InputError):
    """A bisect that cannot start or cannot conclude; the message is one line for the user."""


class BisectInputError(BisectError):
    """A bisect that cannot start because of its inputs; its message is always a template
    naming them by :class:`~orchestrator.bisect.run.BisectRequest` field."""

    names_inputs = True


class BuildError(VmatrixError, RuntimeError):
    """An engine environment cannot be built; the message names what failed."""


class EnvBuildError(BuildError):
    """A recipe's venv cannot be built (local runtime)."""


class ImageBuildError(BuildError):
    """A recipe's image cannot be built (docker runtime)."""


class SweepError(VmatrixError, RuntimeError):
    """The sweep cannot start at all (not: a cell failed; that is a recorded result)."""


class GateError(VmatrixError, RuntimeError):
    """A workload gates a phase (``gate: true``) and the engine serves no scheduler pause
    to hold it with: the cell cannot be run as specified on that engine."""


class ExportError(VmatrixError, RuntimeError):
    """An export that cannot be written."""
