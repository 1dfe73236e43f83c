"""images/offline-host.sh's results DB on a lent GPU host: `setup` creates it with a command
that writes (a read of a DB that is not there is an error now), and `seed` continues an
earlier lease's DB there only while the host's holds no run (2026-12-04: the seeding of a
lease was skipped because setup had created the DB, and a check by file existence took it for
a recorded one). Runs the script itself with this interpreter; no GPU, no Ray."""

from __future__ import annotations

import lzma
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from vmatrix.db.store import Store

REPO = Path(__file__).resolve().parent.parent


def _host(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "VMATRIX_DATA": str(tmp / "data"), "VMATRIX_WHEELHOUSE": str(tmp / "wh"),
           "VMATRIX_SITE": str(tmp / "site"), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(REPO / "images" / "offline-host.sh"), *args], env=env, capture_output=True,
                          text=True, check=False, timeout=120)


def _count(db: Path, table: str) -> int:
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as con:
        return con.execute(f"select count(*) from {table}").fetchone()[0]


def test_init_db_creates_the_store_and_seed_takes_an_earlier_leases_db_only_while_it_is_empty(tmp_path: Path) -> None:
    db = tmp_path / "data" / "results.db"
    made = _host(tmp_path, "init-db")
    assert made.returncode == 0, made.stderr
    assert db.is_file() and _count(db, "runs") == 0

    # An earlier lease's DB, as docs/runs keeps them: one sweep with a run, xz-compressed.
    earlier = tmp_path / "earlier.db"
    store = Store.open(earlier)
    sweep = store.create_sweep("lease-1", "m.yaml", "name: m")
    store.close()
    assert sweep == 1
    archive = tmp_path / "earlier.db.xz"
    archive.write_bytes(lzma.compress(earlier.read_bytes()))

    seeded = _host(tmp_path, "seed", str(archive))
    assert seeded.returncode == 0, seeded.stderr
    assert "seed:" in seeded.stdout
    assert _count(db, "sweeps") == 1 and _count(db, "runs") == 0

    # Once the host has recorded a run, its DB is not replaced.
    shutil.copyfile(REPO / "docs" / "runs" / "quickstart-layout2-2026-12-03.db", db)
    before = db.read_bytes()
    refused = _host(tmp_path, "seed", str(archive))
    assert refused.returncode != 0 and "runs; not replaced" in refused.stderr
    assert db.read_bytes() == before and _count(db, "runs") > 0

    missing = _host(tmp_path, "seed", str(tmp_path / "none.db.xz"))
    assert missing.returncode != 0 and "no such file" in missing.stderr
