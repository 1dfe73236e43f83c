"""`vmatrix`'s command groups, and where each of their commands lives: a command of
another module is imported and built when it is used, not when the command line starts.

`vmatrix results compare` paid for importing every command module (traces, shrink,
bisect, ...) and for Typer building all 26 commands from their signatures before it
read anything: ~0.03 s of ~0.6 s on the project machine, and ~0.1 s more where the
modules have no bytecode yet (issue 42, docs/BENCHMARKS.md). Help, completion and "did
you mean" still see every command: naming them is free, and help builds them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, ClassVar

import typer

from vmatrix.orchestrator.cli.common import Commands

Register = Callable[[typer.Typer], None]


class LazyCommands(Commands):
    """A group whose subcommands in ``later`` are imported and built on first use.
    ``later`` maps a name to a function that registers it on a Typer as app.py would
    (``app.command("bisect")(bisect)``, ``app.add_typer(traces_app, name="traces")``),
    importing its module itself; ``order`` is every name in the order help lists them."""

    later: ClassVar[dict[str, Register]] = {}
    order: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _OnFirstUse(self.commands, self.later, self.order)


class _OnFirstUse(MutableMapping[str, Any]):
    """A group's commands by name: those built already, and the rest built on first look-up
    (``Mapping.get`` of a name that is neither is None, as a dict's)."""

    def __init__(self, built: MutableMapping[str, Any], later: dict[str, Register],
                 order: tuple[str, ...]) -> None:
        self._built = dict(built)
        self._later = {name: register for name, register in later.items() if name not in self._built}
        known = [*self._built, *self._later]
        self._names = [name for name in order if name in known] + [name for name in known if name not in order]

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            register = self._later.pop(name)  # KeyError for a name the group has not got
            holder = typer.Typer(add_completion=False)
            register(holder)
            # Built as Typer builds a group's commands (typer.main.get_group_from_info).
            self._built[name] = typer.main.get_group(holder).commands[name]
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._later.pop(name, None)
        self._built[name] = command
        if name not in self._names:
            self._names.append(name)

    def __delitem__(self, name: str) -> None:
        if name not in self._names:
            raise KeyError(name)
        self._built.pop(name, None)
        self._later.pop(name, None)
        self._names.remove(name)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)


def _report(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.results import report

    app.command("report")(report)


def _publish(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.results import publish

    app.command("publish")(publish)


def _bisect(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.bisect import bisect

    app.command("bisect")(bisect)


def _fixes(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.fixes import fixes

    app.command("fixes")(fixes)


def _watch(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.watch import watch

    app.command("watch")(watch)


def _repro(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.repro import repro

    app.command("repro")(repro)


def _shrink(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.shrink import shrink

    app.command("shrink")(shrink)


def _traces(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.traces import traces_app

    app.add_typer(traces_app, name="traces")


def _images(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.images import images_app

    app.add_typer(images_app, name="images")


def _noise(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.noise import results_noise

    app.command("noise")(results_noise)


def _regrade(app: typer.Typer) -> None:
    from vmatrix.orchestrator.cli.regrade import results_regrade

    app.command("regrade")(results_regrade)


class Root(LazyCommands):
    """`vmatrix` itself; `sweep`, `results` and `canary` are app.py's own groups."""

    later: ClassVar[dict[str, Register]] = {
        "report": _report, "publish": _publish, "bisect": _bisect, "fixes": _fixes, "watch": _watch, "repro": _repro,
        "shrink": _shrink, "traces": _traces, "images": _images,
    }
    order = ("report", "publish", "bisect", "fixes", "watch", "repro", "shrink", "sweep", "results", "canary",
             "traces", "images")


class Results(LazyCommands):
    """`vmatrix results`: `compare`, `export` and `diff` are cli/results.py's, `ls`, `show`
    and `table` app.py's, all built with the group."""

    later: ClassVar[dict[str, Register]] = {"noise": _noise, "regrade": _regrade}
    order = ("compare", "export", "diff", "noise", "regrade", "ls", "show", "table")
