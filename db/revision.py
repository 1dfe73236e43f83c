"""The newest migration's revision id, as a constant that costs nothing to import.

A store whose ``alembic_version`` row holds it needs no migration, so it can be opened
without alembic (~0.2 s to import) or, for the read-only CLI commands on SQLite, without
SQLAlchemy at all (``db/reads.py``). Adding a migration means bumping this;
``tests/test_db.py`` fails until it equals alembic's own script head.
"""

HEAD_REVISION = "0012"
