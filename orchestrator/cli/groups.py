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
from importlib import import_module
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


def _command(name: str, module: str, function: str) -> Register:
    """Register ``function`` of ``vmatrix.orchestrator.cli.<module>`` as the command ``name``."""
    def register(app: typer.Typer) -> None:
        app.command(name)(getattr(import_module(f"vmatrix.orchestrator.cli.{module}"), function))
    return register


def _group(name: str, module: str, group: str) -> Register:
    """Register the Typer group ``group`` of ``vmatrix.orchestrator.cli.<module>`` as ``name``."""
    def register(app: typer.Typer) -> None:
        app.add_typer(getattr(import_module(f"vmatrix.orchestrator.cli.{module}"), group), name=name)
    return register


class Root(LazyCommands):
    """`vmatrix` itself; `sweep`, `results` and `canary` are app.py's own groups."""

    later: ClassVar[dict[str, Register]] = {
        "report": _command("report", "results", "report"), "publish": _command("publish", "results", "publish"),
        "bisect": _command("bisect", "bisect", "bisect"), "fixes": _command("fixes", "fixes", "fixes"),
        "watch": _command("watch", "watch", "watch"), "repro": _command("repro", "repro", "repro"),
        "shrink": _command("shrink", "shrink", "shrink"), "traces": _group("traces", "traces", "traces_app"),
        "images": _group("images", "images", "images_app"),
    }
    order = ("report", "publish", "bisect", "fixes", "watch", "repro", "shrink", "sweep", "results", "canary",
             "traces", "images")


class Results(LazyCommands):
    """`vmatrix results`: `compare`, `export` and `diff` are cli/results.py's, `ls`, `show`
    and `table` app.py's, all built with the group."""

    later: ClassVar[dict[str, Register]] = {"noise": _command("noise", "noise", "results_noise"),
                                            "regrade": _command("regrade", "regrade", "results_regrade"),
                                            "merge": _command("merge", "merge", "results_merge")}
    order = ("compare", "export", "diff", "noise", "regrade", "merge", "ls", "show", "table")
