"""Alembic environment; the Config is built in code by :func:`db.store.alembic_config`."""

from alembic import context
from sqlalchemy import create_engine, pool

from vmatrix.db.models import Base

config = context.config

# A private engine without the store's connect hooks: SQLite foreign keys stay off here,
# which batch mode needs to copy-and-drop a table that other tables reference.
engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
try:
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
finally:
    engine.dispose()
