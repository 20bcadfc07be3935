"""Approval tokens: bound to (inbox, request_id), expiring, rotatable, total on crafted input;
an answer token binds its answer too."""

from __future__ import annotations

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from wakeful.settings import SettingsError, WebSettings
from wakeful.approval_tokens import answer_token, approval_link, check_token, make_token

KEY = "k" * 32
NOW = 1_700_000_000


def check(token: str, inbox: str = "alice", request_id: str = "deploy-1", now: int = NOW, keys=(KEY,),  # type: ignore[no-untyped-def]
          answer: str | None = None):
    return check_token(token, inbox, request_id, secrets=keys, now=now, answer=answer)


def test_round_trip_and_binding() -> None:
    token = make_token("alice", "deploy-1", expires_in=600, secret=KEY, now=NOW)
    assert check(token) is None
    assert check(token, inbox="bob") == "bad_token"
    assert check(token, request_id="deploy-2") == "bad_token"
    assert check(token, keys=("another key",)) == "bad_token"
    assert check(token, keys=()) == "bad_token"


def test_no_separator_ambiguity() -> None:
    # ("a.b", "c") and ("a", "b.c") must not share a token
    token = make_token("a.b", "c", expires_in=600, secret=KEY, now=NOW)
    assert check(token, inbox="a.b", request_id="c") is None
    assert check(token, inbox="a", request_id="b.c") == "bad_token"


def test_expiry() -> None:
    token = make_token("alice", "deploy-1", expires_in=600, secret=KEY, now=NOW)
    assert check(token, now=NOW + 599) is None
    assert check(token, now=NOW + 600) == "expired_token"


def test_expiry_cannot_be_extended() -> None:
    token = make_token("alice", "deploy-1", expires_in=600, secret=KEY, now=NOW)
    stamp, mac = token.split(".")
    assert check(f"{int(stamp) + 10**6}.{mac}", now=NOW + 700) == "bad_token"


def test_rotation_first_signs_any_verifies() -> None:
    old = make_token("alice", "deploy-1", expires_in=600, secret="old-key", now=NOW)
    new = make_token("alice", "deploy-1", expires_in=600, secret=("new-key", "old-key"), now=NOW)
    assert check(old, keys=("new-key", "old-key")) is None
    assert check(new, keys=("new-key", "old-key")) is None
    assert check(new, keys=("new-key",)) is None
    assert check(new, keys=("old-key",)) == "bad_token"


def test_no_secret_refuses_to_sign(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WAKEFUL_APPROVAL_SECRET", raising=False)
    with pytest.raises(SettingsError, match="WAKEFUL_APPROVAL_SECRET"):
        make_token("alice", "deploy-1", expires_in=60, secret=WebSettings.from_env().approval_secrets)


def test_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAKEFUL_APPROVAL_SECRET", "env-key-1,env-key-0")
    monkeypatch.setenv("WAKEFUL_PUBLIC_URL", "https://agent.example/")
    web = WebSettings.from_env()  # what a process loads at its start and passes down
    link = approval_link("team/alice", "deploy 1", now=NOW, base_url=web.public_url, secret=web.approval_secrets,
                         expires_in=web.approval_token_ttl)
    assert link.startswith("https://agent.example/approvals/team%2Falice/deploy%201?token=")
    token = link.split("token=")[1]
    assert check(token, inbox="team/alice", request_id="deploy 1", keys=("env-key-1",)) is None
    expected_ttl = WebSettings().approval_token_ttl
    assert check(token, inbox="team/alice", request_id="deploy 1", keys=("env-key-1",),
                 now=NOW + expected_ttl) == "expired_token"


def test_an_answer_token_covers_its_answer_only() -> None:
    link = make_token("alice", "deploy-1", expires_in=600, secret=(KEY, "older"), now=NOW)
    no = answer_token(link, "no")
    assert check(no, answer="no") is None and check(no, answer="no", keys=("older", KEY)) is None
    assert check(no, answer="yes") == "bad_token"
    assert check(no) == "bad_token"  # not a link's token
    assert check(link, answer="no") == "bad_token"  # the link's token names no answer
    assert check(no, answer="no", request_id="deploy-2") == "bad_token"
    assert check(no, answer="no", now=NOW + 600) == "expired_token"  # the link's expiry
    for crafted in ("", "123", "123.", "x.abc", "123.@@@", "123." + "A" * 10):
        with pytest.raises(ValueError):
            answer_token(crafted, "no")


@hsettings(max_examples=300, deadline=None)
@given(st.text(max_size=120), st.sampled_from([None, "yes", "no"]))
def test_crafted_tokens_never_raise(token: str, answer: str | None) -> None:
    assert check(token, answer=answer) in ("bad_token", "expired_token")
