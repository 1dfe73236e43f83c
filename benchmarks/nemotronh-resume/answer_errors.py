"""What a canary report's wrong answers got wrong (issue 41): for each document's newest
control run in a `vmatrix canary report` DB, each answer that does not match its line, classified as the
line's words with more after them, the line's words cut short, or other words (another line,
or a wrong word), with the asked line's index in its document. It rebuilds each workload's
system prompt from its seed, as jobs/workload.py does.

    python benchmarks/nemotronh-resume/answer_errors.py docs/runs/nemotronh-lk-n10-report-cpu-2026-12-06.db.xz
"""

from __future__ import annotations

import collections
import json
import random
import sqlite3
import sys
import tempfile
from pathlib import Path

from vmatrix.db.copies import unpacked
from vmatrix.images.canary import corpus


def open_db(path: Path) -> sqlite3.Connection:
    if path.suffix == ".xz":
        path = unpacked(path, Path(tempfile.mkdtemp()))
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def kind_of(want: list[str], got: list[str]) -> str:
    if len(got) > len(want) and got[:len(want)] == want:
        return "the line's words, then more"
    if len(got) < len(want) and want[:len(got)] == got:
        return "the line's words, cut short"
    return "other words"


def main(path: Path) -> None:
    db = open_db(path)
    kinds: collections.Counter = collections.Counter()
    newest: dict[tuple[int, int], int] = {}  # (prefix, seed) -> run: a document asked again counts once
    rows = db.execute("select r.id, c.spec, c.knobs from runs r join cells c on r.cell_id = c.id order by r.id")
    for run, spec, knobs in rows:
        if json.loads(knobs).get("speculative"):
            continue  # the control runs: what the model answers, not what a drafter changed
        workload = json.loads(spec)["workload"]
        newest[(workload["prefix_tokens"], workload.get("seed", 0))] = run
    for (prefix, seed), run in sorted(newest.items()):
        _, defs = corpus.system_prompt(random.Random(seed), corpus.lines_for(prefix))
        answers = db.execute("select key, expect, text, answer_chars from requests where run_id = ?", (run,))
        for key, expect, text, chars in answers:
            want = json.loads(expect)["exact"]
            got = text[:chars] if chars is not None else None
            if got is not None and got.strip() == want.strip():
                continue
            kind = "no end within max_tokens" if got is None else kind_of(want.split(" = ")[1].split(),
                                                                          got.split(" = ")[-1].split())
            kinds[(prefix, kind)] += 1
            line = defs.index(want) if want in defs else -1
            print(f"run {run} {prefix} seed {seed} {key} line {line}/{len(defs)}: {want!r} -> {got!r} ({kind})")
    for (prefix, kind), n in sorted(kinds.items()):
        print(f"{prefix:>6} {kind}: {n}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
