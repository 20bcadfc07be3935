"""Alembic, driven from code: the migrations ship inside the package (``store/migrations``)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

SCRIPT_LOCATION = "store:migrations"


def config(engine: Engine | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if engine is not None:
        cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(config(engine), revision)
