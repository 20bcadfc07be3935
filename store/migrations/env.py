"""Alembic environment: runs against the engine handed in by ``store.migrate``."""

from alembic import context

from store.tables import metadata

engine = context.config.attributes["engine"]

with engine.begin() as connection:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters by table copy
    )
    context.run_migrations()
