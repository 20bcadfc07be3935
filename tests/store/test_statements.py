"""The hot path's SQL is checked in whole (store/sql/), and the files say what the code sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import statements


def test_the_checked_in_sql_is_what_the_code_sends() -> None:
    assert statements.drift() == [], "run python -m store.statements --write and commit store/sql"


def test_a_drifted_missing_or_stray_file_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statements, "SQL_DIR", tmp_path)
    statements.write()
    assert statements.drift() == []
    claim = tmp_path / "claim.postgresql.sql"
    claim.write_text(claim.read_text().replace("attempts + ", "attempts + 2 + "))
    (tmp_path / "lock.sqlite.sql").unlink()
    (tmp_path / "gone.sqlite.sql").write_text("SELECT 1;\n")
    assert sorted(statements.drift()) == ["claim.postgresql.sql: differs from the code",
                                          "gone.sqlite.sql: no such statement", "lock.sqlite.sql: missing"]


def test_every_plan_function_is_among_the_named_statements() -> None:
    from store import plans

    named = {plans.PREFIX + name for name in statements.HOT}
    assert {plan.name for plan in plans.registered()} <= named
