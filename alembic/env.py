"""Alembic environment for profdb. Configured in code (no alembic.ini): the app passes an open
connection in ``config.attributes["connection"]`` (profdb.store.db.upgrade_db). Run by hand with
``alembic -x url=sqlite:///profdb.db -c /dev/null upgrade head`` is not needed: ``profdb`` upgrades
every store it opens."""

from __future__ import annotations

from sqlalchemy import create_engine

from alembic import context
from profdb.store.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite ALTER TABLE support
        compare_type=True,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("pass -x url=DATABASE_URL")
    engine = create_engine(url)
    with engine.begin() as conn:
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
