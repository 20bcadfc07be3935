"""``wakeful hooks``: set, list, remove and rekey per-inbox webhook secrets; no command prints
a secret; a missing or wrong key is a clear error."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from store import Store
from store.hook_secrets import cipher, new_key


def test_hooks_set_list_remove_rekey(db_url: str, make_store: Callable[..., Store],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from wakeful.cli.main import cli

    old, new = new_key(), new_key()
    runner = CliRunner()

    def run(*args: str, key: str = old, stdin: str | None = None):  # type: ignore[no-untyped-def]
        return runner.invoke(cli, ["hooks", *args], input=stdin, catch_exceptions=False,
                             env={"WAKEFUL_DATABASE_URL": db_url, "WAKEFUL_SECRETS_KEY": key})

    assert run("set", "alice", "github", "gh-secret-alice").exit_code == 0
    assert run("set", "bob", "stripe", stdin="whsec_new\nwhsec_old\n").exit_code == 0
    bad = run("set", "carol", "standard", "not base64!")
    assert bad.exit_code == 2 and "whsec_" in bad.output and "not base64!" not in bad.output
    assert run("set", "carol", "gitlab", "x").exit_code == 2
    assert run("set", "carol", "github", "a", "b", "c").exit_code == 2
    assert run("set", "carol", "github", "x", key="").exit_code == 2  # no key: refused

    listed = run("list").output
    assert "alice" in listed and "bob" in listed and "carol" not in listed
    assert "gh-secret" not in listed and "whsec" not in listed
    assert "?" in run("list", key=new).output  # a key that cannot open the rows: counts unknown

    store = make_store()
    assert store.hook_secrets.unsealed(cipher=cipher(old))["bob"] == {"stripe": ("whsec_new", "whsec_old")}
    assert run("rekey", key=f"{new},{old}").exit_code == 0
    assert store.hook_secrets.unsealed(cipher=cipher(new))["alice"] == {"github": ("gh-secret-alice",)}
    assert run("remove", "alice").exit_code == 0
    assert run("remove", "alice").exit_code == 1  # nothing left to remove
    assert [r.inbox for r in store.hook_secrets.rows()] == ["bob"]
