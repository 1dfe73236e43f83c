"""The recorded results under docs/runs say `clean` only where everything was measured.

Every run's newest grade in every DB under docs/runs: a `clean` whose coverage lists an
`unmeasured` item would be a partial result shown as a whole one (issue 38: 25 of the 44
newest clean prefix-caching grades were, before the regrade of 2026-12-03). Read with
sqlite3 from the files as committed, so the check opens nothing that would migrate them,
and leaves nothing beside them (no -wal or -shm in docs/runs after the suite).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.recorded_dbs import RUNS, db_name, read_only, shipped, unpacked

DBS = shipped()


def test_there_are_recorded_dbs() -> None:
    assert len(DBS) >= 20


@pytest.mark.parametrize("db", DBS, ids=[db_name(d) for d in DBS])
def test_no_bare_clean_over_an_unmeasured_item(db: Path) -> None:
    beside = sorted(p.name for p in RUNS.glob(f"{db_name(db)}-*"))
    con = read_only(unpacked(db_name(db)))
    rows = con.execute("SELECT g.run_id, g.verdict, g.evidence FROM grades g "
                       "WHERE g.id = (SELECT max(id) FROM grades WHERE run_id = g.run_id)").fetchall()
    con.close()
    # The read left no -wal or -shm next to the committed file.
    assert sorted(p.name for p in RUNS.glob(f"{db_name(db)}-*")) == beside
    bare = [(run, json.loads(ev)["coverage"]["unmeasured"]) for run, verdict, ev in rows
            if verdict == "clean" and ev and (json.loads(ev).get("coverage") or {}).get("unmeasured")]
    assert not bare, f"{db_name(db)}: runs graded clean over unmeasured items: {bare[:3]}"
