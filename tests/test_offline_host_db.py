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


def test_freeze_copies_the_checkout_whole_without_uploads_and_the_copy_runs_from_itself(tmp_path: Path) -> None:
    """`freeze` (benchmarks/gpu_chain.sh runs the sweeps from its copy): on 2026-12-05 a `run`
    call that re-copied the checkout while a sweep's workers imported vmatrix crashed 5 of 8
    cells. A small checkout stands in for the real one: the script, a module, an upload, a DB."""
    checkout = tmp_path / "checkout"
    (checkout / "images").mkdir(parents=True)
    shutil.copy(REPO / "images" / "offline-host.sh", checkout / "images" / "offline-host.sh")
    (checkout / "vmatrix").mkdir()
    (checkout / "vmatrix" / "speed.py").write_text("x = 1\n")
    (checkout / ".gpu" / "call").mkdir(parents=True)
    (checkout / ".gpu" / "call" / "v000").write_bytes(b"upload")
    (checkout / "docs" / "runs").mkdir(parents=True)
    (checkout / "docs" / "runs" / "lease.db.xz").write_bytes(b"db")
    (checkout / "docs" / "GPU.md").write_text("procedure\n")
    env = {**os.environ, "VMATRIX_DATA": str(tmp_path / "data"), "VMATRIX_WHEELHOUSE": str(tmp_path / "wh"),
           "VMATRIX_SITE": str(tmp_path / "site"), "PYTHON": sys.executable}

    def freeze(script: Path, dest: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), "freeze", *([str(dest)] if dest else [])], env=env,
                              capture_output=True, text=True, check=False, timeout=60)

    made = freeze(checkout / "images" / "offline-host.sh")
    frozen = tmp_path / "data" / "src"
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == f"frozen: {frozen}"
    assert (frozen / "vmatrix" / "speed.py").read_text() == "x = 1\n"
    assert (frozen / "docs" / "GPU.md").is_file()
    assert not (frozen / ".gpu").exists() and not (frozen / "docs" / "runs").exists()
    assert not (tmp_path / "data" / "src.tmp").exists()

    # A later upload changes the checkout, not the copy; freezing again replaces the copy whole.
    (checkout / "vmatrix" / "speed.py").write_text("x = 2\n")
    assert (frozen / "vmatrix" / "speed.py").read_text() == "x = 1\n"
    assert freeze(checkout / "images" / "offline-host.sh").returncode == 0
    assert (frozen / "vmatrix" / "speed.py").read_text() == "x = 2\n"

    # The copy's own script works from the copy (its REPO is the copy, not the checkout).
    again = freeze(frozen / "images" / "offline-host.sh", tmp_path / "second")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "second" / "vmatrix" / "speed.py").read_text() == "x = 2\n"
    (checkout / "vmatrix" / "speed.py").write_text("x = 3\n")
    assert freeze(frozen / "images" / "offline-host.sh", tmp_path / "second").returncode == 0
    assert (tmp_path / "second" / "vmatrix" / "speed.py").read_text() == "x = 2\n"
