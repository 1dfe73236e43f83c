"""The recorded results under docs/runs say `clean` only where everything was measured.

Every run's newest grade in every DB under docs/runs: a `clean` whose coverage lists an
`unmeasured` item would be a partial result shown as a whole one (issue 38: 25 of the 44
newest clean prefix-caching grades were, before the regrade of 2026-12-03). Read with
sqlite3 from the files as committed, so the check opens nothing that would migrate them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.recorded_dbs import db_name, shipped, unpacked

DBS = shipped()


def test_there_are_recorded_dbs() -> None:
    assert len(DBS) >= 20


@pytest.mark.parametrize("db", DBS, ids=[db_name(d) for d in DBS])
def test_no_bare_clean_over_an_unmeasured_item(db: Path) -> None:
    con = sqlite3.connect(f"file:{unpacked(db_name(db))}?mode=ro", uri=True)
    rows = con.execute("SELECT g.run_id, g.verdict, g.evidence FROM grades g "
                       "WHERE g.id = (SELECT max(id) FROM grades WHERE run_id = g.run_id)").fetchall()
    con.close()
    bare = [(run, json.loads(ev)["coverage"]["unmeasured"]) for run, verdict, ev in rows
            if verdict == "clean" and ev and (json.loads(ev).get("coverage") or {}).get("unmeasured")]
    assert not bare, f"{db_name(db)}: runs graded clean over unmeasured items: {bare[:3]}"
