"""Reading a results DB never changes it (db/copies.py).

A read-only command (`results ls`, `table`, `show`, `export`, `report`, `publish`, ...)
opens a DB behind the newest migration through a migrated copy in the cache, and a
``NAME.db.xz`` through its unpacked copy; a command that writes refuses an archive with one
line naming it. The DBs are shipped ones (docs/runs, tests/recorded_dbs.py), copied first.
"""

from __future__ import annotations

import hashlib
import lzma
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.recorded_dbs import copy_to, db_name, shipped
from vmatrix.db import copies
from vmatrix.db.revision import HEAD_REVISION
from vmatrix.db.store import Store
from vmatrix.errors import StoreError
from vmatrix.orchestrator.cli import app

runner = CliRunner()
QUICKSTART = Path(__file__).parent.parent / "examples" / "quickstart.yaml"
# Plain shipped DBs recorded before the newest migration: what a read used to migrate in place.
OLD_PLAIN = [p for p in shipped() if p.name.endswith(".db") and copies.needs_migrating(p)]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def revision(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    finally:
        conn.close()


def first(db: Path, sql: str) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: the same DB is copied and migrated once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A plain shipped DB at an older schema revision, copied into tmp_path."""
    assert OLD_PLAIN, "docs/runs ships no plain DB behind the newest migration any more: pick another fixture"
    db = copy_to(OLD_PLAIN[0], tmp_path)
    assert revision(db) != HEAD_REVISION
    return db


def invoke(argv: list[str], cache: Path):
    return runner.invoke(app, argv, env={"VMATRIX_CACHE": str(cache), "COLUMNS": "200"})


READS = {
    "ls": lambda db, out: ["results", "ls", "--db", str(db)],
    "table": lambda db, out: ["results", "table", "--db", str(db)],
    "show": lambda db, out: ["results", "show", first(db, "SELECT cell_id FROM runs ORDER BY id DESC"),
                             "--db", str(db)],
    "export": lambda db, out: ["results", "export", "--format", "csv", "-o", str(out / "runs.csv"), "--db", str(db)],
    "report": lambda db, out: ["report", first(db, "SELECT min(id) FROM sweeps"), "-o", str(out / "r.html"),
                               "--db", str(db)],
    "publish": lambda db, out: ["publish", str(out / "site"), "--db", str(db)],
}


@pytest.mark.parametrize("command", sorted(READS))
def test_a_read_leaves_an_old_schema_db_byte_for_byte_unchanged(old: Path, cache: Path, tmp_path: Path,
                                                               command: str) -> None:
    before = sha(old)
    done = invoke(READS[command](old, tmp_path), cache)
    assert done.exit_code == 0, done.output
    assert sha(old) == before, f"`{command}` changed {old.name}"
    assert revision(old) != HEAD_REVISION
    # Nothing left beside it either (a read-only connection to a WAL store leaves -wal and -shm).
    assert sorted(p.name for p in old.parent.glob(f"{old.name}*")) == [old.name]


def test_the_copy_reads_as_the_db_migrated_in_place_would(old: Path, cache: Path, tmp_path: Path) -> None:
    migrated = tmp_path / "migrated" / old.name
    migrated.parent.mkdir()
    shutil.copy(old, migrated)
    Store.open(migrated).close()
    assert revision(migrated) == HEAD_REVISION
    for argv in (["results", "ls"], ["results", "table", "--format", "json"]):
        assert invoke([*argv, "--db", str(old)], cache).output == invoke([*argv, "--db", str(migrated)], cache).output
    copy = copies.for_reading(str(old), cache)
    assert Path(copy).parent.name.endswith(f"-at-{HEAD_REVISION}") and Path(copy).name == old.name
    assert revision(Path(copy)) == HEAD_REVISION


def test_a_db_at_head_is_read_as_it_is(tmp_path: Path, cache: Path) -> None:
    db = tmp_path / "r.db"
    Store.open(db).close()
    assert copies.for_reading(str(db), cache) == str(db)
    assert copies.for_reading("postgresql://h/db", cache) == "postgresql://h/db"


def test_a_write_still_migrates_the_db_it_names(old: Path, cache: Path) -> None:
    Store.open(old).close()
    assert revision(old) == HEAD_REVISION


@pytest.fixture
def archive(old: Path) -> Path:
    """``old`` as ``NAME.db.xz`` beside it, the plain file gone."""
    packed = old.with_name(old.name + ".xz")
    with open(old, "rb") as src, lzma.open(packed, "wb", preset=1) as dst:
        shutil.copyfileobj(src, dst)
    old.unlink()
    return packed


def test_an_archive_is_read_through_its_unpacked_copy(archive: Path, cache: Path, tmp_path: Path) -> None:
    before = sha(archive)
    plain = tmp_path / "plain" / db_name(archive)
    plain.parent.mkdir()
    with lzma.open(archive) as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    for argv in (["results", "ls"], ["results", "table"]):
        done = invoke([*argv, "--db", str(archive)], cache)
        assert done.exit_code == 0 and done.output == invoke([*argv, "--db", str(plain)], cache).output, done.output
    assert sha(archive) == before
    assert [p.name for p in archive.parent.glob(f"{db_name(archive)}*")] == [archive.name]
    # Unpacked once, named for the archive's digest; migrated beside it (it was behind head).
    unpacked = cache / "dbs" / copies.digest(archive) / db_name(archive)
    assert unpacked.is_file() and revision(unpacked) != HEAD_REVISION
    assert not list((cache / "dbs").rglob("*.part"))


@pytest.mark.parametrize("argv", [
    ["results", "regrade", "1"],
    ["sweep", "run", str(QUICKSTART)],
    ["fixes", "abc123", "--candidate", "some-set"],
    ["bisect", "--matrix", str(QUICKSTART), "--cell", "prefix_caching=on", "--good", "0.27.1", "--bad", "0.28.0"],
    ["shrink", "abc123"],
    ["watch", str(QUICKSTART), "--once"],
], ids=lambda argv: argv[0] if argv[0] != "results" else argv[1])
def test_a_command_that_writes_refuses_an_archive_naming_it(archive: Path, cache: Path, argv: list[str]) -> None:
    before = sha(archive)
    done = invoke([*argv, "--db", str(archive)], cache)
    assert done.exit_code == 2
    assert done.output.strip().splitlines() == [
        f"error: --db {archive}: a read-only xz archive: decompress it to write to it (xz -dk {archive})"]
    assert sha(archive) == before


def test_the_library_refuses_to_open_an_archive_as_a_store(tmp_path: Path) -> None:
    packed = tmp_path / "r.db.xz"
    packed.write_bytes(lzma.compress(b""))
    with pytest.raises(StoreError, match=r"^db .*r\.db\.xz: a read-only xz archive") as exc:
        Store.open(packed)
    assert exc.value.inputs == ("db",)
    with pytest.raises(StoreError, match="a read-only xz archive"):
        Store.open(f"sqlite:///{packed}")


def test_a_missing_or_broken_archive_is_one_line(tmp_path: Path, cache: Path) -> None:
    missing = tmp_path / "missing.db.xz"
    done = invoke(["results", "ls", "--db", str(missing)], cache)
    assert done.exit_code == 2 and done.output.strip() == f"error: --db {missing}: no such file"
    assert not missing.exists()
    broken = tmp_path / "broken.db.xz"
    broken.write_bytes(b"not xz")
    done = invoke(["results", "ls", "--db", str(broken)], cache)
    assert done.exit_code == 2 and done.output.startswith(f"error: --db {broken}: cannot decompress it"), done.output


# Every command that only reads a results DB, on a --db that is not there. `publish` says
# "file or folder" (its --db may name a folder); the others name the file alike.
MISSING_READS = {
    **{name: make for name, make in READS.items() if name not in ("show", "report")},
    "show": lambda db, out: ["results", "show", "abc123", "--db", str(db)],
    "report": lambda db, out: ["report", "1", "-o", str(out / "r.html"), "--db", str(db)],
    "diff": lambda db, out: ["results", "diff", "1", "2", "--db", str(db)],
    "noise": lambda db, out: ["results", "noise", "--db", str(db)],
    "compare": lambda db, out: ["results", "compare", "--baseline", "prefix_caching=off", "--candidate",
                                "prefix_caching=on", "--db", str(db)],
    "repro": lambda db, out: ["repro", "abc123", "-o", str(out / "repro.py"), "--db", str(db)],
}


@pytest.mark.parametrize("suffix", [".db", ".db.xz"])
@pytest.mark.parametrize("command", sorted(MISSING_READS))
def test_a_read_of_a_db_that_is_not_there_is_one_line_and_creates_nothing(tmp_path: Path, cache: Path, command: str,
                                                                         suffix: str) -> None:
    # In a folder that is not there either: opening it as a store used to make both.
    missing = tmp_path / "typo" / f"results{suffix}"
    done = invoke(MISSING_READS[command](missing, tmp_path), cache)
    what = "no such file or folder" if command == "publish" else "no such file"
    assert done.exit_code == 2
    assert done.output.strip().splitlines() == [f"error: --db {missing}: {what}"]
    assert not missing.parent.exists()


def test_a_read_of_a_sqlite_url_that_is_not_there_is_one_line(tmp_path: Path, cache: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing.db'}"
    for argv in (["results", "ls"], ["results", "table"]):
        done = invoke([*argv, "--db", url], cache)
        assert done.exit_code == 2 and done.output.strip().splitlines() == [f"error: --db {url}: no such file"]
    assert not (tmp_path / "missing.db").exists()


def test_the_library_read_of_a_missing_db_names_it(tmp_path: Path, cache: Path) -> None:
    for missing in (tmp_path / "new.db", tmp_path / "new.db.xz"):
        with pytest.raises(StoreError, match=r"^db .*new\.db(\.xz)?: no such file$") as exc:
            copies.for_reading(str(missing), cache)
        assert exc.value.inputs == ("db",)
        assert not missing.exists()


def test_a_command_that_writes_still_creates_a_new_db(tmp_path: Path, cache: Path) -> None:
    db = tmp_path / "new" / "results.db"
    done = invoke(["results", "regrade", "1", "--db", str(db)], cache)
    assert done.exit_code == 2 and "no such file" not in done.output, done.output  # no sweep 1: but the store is made
    assert revision(db) == HEAD_REVISION


def test_a_read_without_db_still_opens_the_default_store(tmp_path: Path, cache: Path) -> None:
    # Nothing recorded yet: the default store is where `sweep run` writes, so "nothing" is the answer.
    data = tmp_path / "data"
    done = runner.invoke(app, ["results", "ls"], env={"VMATRIX_CACHE": str(cache), "VMATRIX_DATA": str(data)})
    assert done.exit_code == 0, done.output


def test_a_changed_archive_unpacks_afresh(tmp_path: Path) -> None:
    packed = tmp_path / "r.db.xz"
    packed.write_bytes(lzma.compress(b"one"))
    first_copy = copies.unpacked(packed, tmp_path / "cache")
    assert first_copy.read_bytes() == b"one" and first_copy.name == "r.db"
    assert copies.unpacked(packed, tmp_path / "cache") == first_copy  # reused
    packed.write_bytes(lzma.compress(b"two"))
    second = copies.unpacked(packed, tmp_path / "cache")
    assert second != first_copy and second.read_bytes() == b"two"
    assert sorted(p.name for p in second.parent.iterdir()) == ["r.db"]  # no .part left


def test_publish_takes_the_archives_of_a_folder(archive: Path, cache: Path, tmp_path: Path) -> None:
    # The folder holds nothing else: without the archive it would be "a folder with no *.db".
    done = invoke(["publish", str(tmp_path / "site"), "--db", str(archive.parent)], cache)
    assert done.exit_code == 0, done.output
    assert (tmp_path / "site" / "index.html").is_file()


def test_a_read_of_a_server_store_behind_head_is_refused_not_upgraded(pg_server, cache: Path) -> None:
    """A PostgreSQL store has no copy to read through: a read of one behind the newest
    migration is one line saying so, and the server's schema stays where it was (others
    with older vmatrix installs share it); a command that writes upgrades it as before.
    A real server (tests/conftest.py's); with VMATRIX_TEST_PG unset the test is skipped."""
    from alembic import command as alembic
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine

    from vmatrix.db.store import alembic_config, to_url

    url = pg_server.new_database()
    Store.open(url).close()  # the schema at head, then one migration back
    alembic.downgrade(alembic_config(to_url(url)), "-1")

    def current() -> str | None:
        engine = create_engine(to_url(url))
        try:
            with engine.connect() as conn:
                return MigrationContext.configure(conn).get_current_revision()
        finally:
            engine.dispose()

    behind = current()
    assert behind is not None and behind != HEAD_REVISION
    for argv in (["results", "ls", "--db", url], ["results", "table", "--db", url]):
        done = invoke(argv, cache)
        assert done.exit_code != 0, done.output
        lines = [line for line in done.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "behind" in lines[0] and behind in lines[0] and "does not upgrade" in lines[0], \
            done.output
        assert current() == behind, f"`{argv[1]}` upgraded the server's store"
    with pytest.raises(StoreError, match="a read does not upgrade it"):
        Store.open(url, migrate=False)
    Store.open(url).close()  # a write upgrades it
    assert current() == HEAD_REVISION
    # An empty database is given the schema by a read as before: nothing there to change.
    empty = pg_server.new_database()
    assert invoke(["results", "ls", "--db", empty], cache).exit_code == 0


def test_copies_not_read_for_two_weeks_go_when_the_next_is_made(archive: Path, tmp_path: Path) -> None:
    import os
    import time

    cache = tmp_path / "prune-cache"
    stale, recent = cache / "0123456789abcdef", cache / "fedcba9876543210"
    for folder in (stale, recent):
        folder.mkdir(parents=True)
        (folder / "results.db").write_bytes(b"x")
    old_time = time.time() - copies.KEEP_S - 3600
    os.utime(stale, (old_time, old_time))
    os.utime(recent, (time.time() - copies.KEEP_S + 3600,) * 2)
    plain = copies.unpacked(archive, cache)  # a new copy: the stale one goes, the other stays
    assert not stale.exists() and recent.is_dir() and plain.is_file()
    # A read of an existing copy keeps it another KEEP_S.
    os.utime(plain.parent, (old_time, old_time))
    assert copies.unpacked(archive, cache) == plain
    assert time.time() - plain.parent.stat().st_mtime < 60
