"""How a person names cells in text: one grammar for every place that selects cells.

``KEY=VALUE[,KEY=VALUE...]``, as `vmatrix bisect --cell`, `vmatrix results compare
--baseline/--candidate` take it; a matrix's include/exclude (YAML) take the same
values. Spellings:

- a toggle is on as ``on``/``true``/``yes``/``1`` and off as
  ``off``/``false``/``no``/``0``/``none``/``null`` (any case);
- speculative decoding is ``METHOD``, ``METHOD:TOKENS`` or ``METHOD k=TOKENS``
  (``mtp``, ``mtp:2``, ``mtp k=2``), and off as any off spelling.
"""

from __future__ import annotations

from typing import Any

from vmatrix.errors import InputError

ON = ("on", "true", "yes", "1")
OFF = ("off", "false", "no", "0", "none", "null")


def split(text: str, field: str, error: type[InputError] = InputError) -> list[tuple[str, str]]:
    """``a=1,b=on`` -> ``[("a", "1"), ("b", "on")]``; a part without ``=`` is an ``error``
    naming the input ``field``."""
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise error("{" + field + "}: '{part}' is not KEY=VALUE, e.g. prefix_caching=on,speculative=mtp:2",
                             part=part)
        pairs.append((key.strip(), value.strip()))
    return pairs


def toggle(text: str) -> bool | None:
    """True or False for an on/off spelling; None for anything else."""
    word = text.strip().lower()
    return True if word in ON else False if word in OFF else None


def is_off(value: Any) -> bool:
    """A knob value that means "off" in a matrix file or on the command line."""
    return value is None or value is False or (isinstance(value, str) and value.strip().lower() in OFF)


def speculative(text: str) -> dict[str, Any] | None:
    """``mtp``, ``mtp:2`` or ``mtp k=2`` -> ``{"method": "mtp", "num_speculative_tokens": 2}``;
    an off spelling -> None. ValueError for a token count that is not an integer."""
    if is_off(text):
        return None
    text = " ".join(text.split())
    method, _, k = text.partition(":")
    if not k and " k=" in text:
        method, _, k = text.partition(" k=")
    method = method.strip()
    return {"method": method, **({"num_speculative_tokens": int(k)} if k.strip() else {})}


def normal(text: str) -> str:
    """A value's comparable text: toggles as on/off, speculative as ``METHOD k=N``, numbers as numbers.

    Both sides of a comparison go through it (the user's value, and a stored knob's
    table text), so any spelling of the grammar matches.
    """
    text = " ".join(text.strip().split()).lower()
    flag = toggle(text)
    if flag is not None:
        return "on" if flag else "off"
    try:
        number = float(text)
    except ValueError:
        head, sep, rest = text.partition(" ")  # mtp:2 is mtp k=2; dflash:4 df1 is dflash k=4 df1
        if ":" in head and head.rpartition(":")[2].isdigit():
            method, _, k = head.rpartition(":")
            return f"{method} k={k}{sep}{rest}"
        return text
    return repr(int(number)) if number.is_integer() else repr(number)
