"""The decisive error line of a failed engine, normalised so equal failures compare equal.

vLLM logs a failure several times over: the worker's real exception, then wrappers
("Worker failed with error ...", EngineDeadError) in the engine core and the API
server. The root cause is the first exception that is not a wrapper.
"""

from __future__ import annotations

import re
import signal

_PREFIX = re.compile(r"^\([\w-]+ pid=\d+\)\s+(?:\w+\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s*)?")
_EXCEPTION = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Fault|Interrupt))(?::\s*(.*))?$")
_ARGPARSE = re.compile(r"^[\w.\-]+: error: (.+)$")
# pydantic's "1 validation error for VllmConfig" says which model failed, not why: the
# reason is a few lines below ("  Value error, Model Runner V2 requires Triton. [type=...").
_PYDANTIC_REASON = re.compile(r"^\s*Value error, (.+?)(?: \[type=.*)?$")
_FATAL = re.compile(r"^(Fatal Python error: .+|Segmentation fault.*)$")
_WRAPPERS = (
    "EngineDeadError",
    "Engine core initialization failed",
    "Worker failed with error",
    "EngineCore encountered an issue",
    "SystemExit",
    "KeyboardInterrupt",
    "CancelledError",
    "Engine process failed to start",
)
_VOLATILE = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"pid=\d+"), "pid=?"),
    (re.compile(r"/(?:tmp|root|home|var)/\S*/"), ".../"),
]


def _strip(line: str) -> str:
    return _PREFIX.sub("", line.rstrip()).strip()


def _normalise(text: str) -> str:
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text[:300]


def error_signature(log: str, returncode: int | None = None) -> str | None:
    """Return the root-cause line of an engine log, or None if it shows no error."""
    candidates: list[str] = []
    lines = log.splitlines()
    for i, raw in enumerate(lines):
        line = _strip(raw)
        if m := _EXCEPTION.match(line):
            if m.group(1).endswith("ValidationError") and m.group(2):
                reason = next((r.group(1) for r in map(_PYDANTIC_REASON.match, map(_strip, lines[i + 1:i + 4])) if r), None)
                line = f"{line}: {reason}" if reason else line
            candidates.append(line if m.group(2) else m.group(1))
        elif m := _ARGPARSE.match(line):
            candidates.append(f"argument error: {m.group(1)}")
        elif _FATAL.match(line):
            candidates.append(line)
    roots = [c for c in candidates if not any(w in c for w in _WRAPPERS)]
    if roots:
        return _normalise(roots[0])
    if candidates:
        return _normalise(candidates[-1])
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return None


# vLLM raises a hybrid model's attention block to the mamba state's page and says so once
# per worker at startup; prefix caching restores carried states at multiples of it.
_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")


# Each KV cache group's block once the cache is allocated (0.31.0 on: attention and Mamba
# groups; a Mamba group without prefix caching holds one state per request, max_model_len).
_GROUPS = re.compile(r"kv cache group sizes \[([\d, ]*)\]")


def engine_block_tokens(log: str) -> int | None:
    """The prefix-cache block size a hybrid engine chose, from its log (the last start's,
    when it was restarted); None when it did not say."""
    found = _BLOCK.findall(log)
    return int(found[-1]) if found else None


def engine_group_blocks(log: str) -> tuple[int, ...]:
    """Each KV cache group's block size, from the log (the last start's); () when not said."""
    found = _GROUPS.findall(log)
    return tuple(int(n) for n in found[-1].split(",") if n.strip()) if found else ()
