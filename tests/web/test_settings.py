"""Web settings: parsed from the environment, secrets never shown."""

from __future__ import annotations

import pytest

from wakeful.settings import SettingsError, WebSettings


def test_defaults_refuse_everything_unsigned() -> None:
    s = WebSettings.from_env({})
    assert s.github_secrets == s.stripe_secrets == s.webhook_secrets == s.approval_secrets == ()
    assert s.tolerance == 300
    assert s.max_body_bytes == 1024 * 1024


def test_rotation_lists_and_limits() -> None:
    s = WebSettings.from_env({
        "WAKEFUL_GITHUB_SECRETS": " new , old ,",
        "WAKEFUL_STRIPE_SECRETS": "whsec_a",
        "WAKEFUL_WEBHOOK_SECRETS": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "WAKEFUL_APPROVAL_SECRET": "k1,k0",
        "WAKEFUL_WEB_MAX_BODY": "2048",
        "WAKEFUL_WEB_TOLERANCE": "60",
    })
    assert s.github_secrets == ("new", "old")
    assert len(s.webhook_secrets) == 2
    assert s.approval_secrets == ("k1", "k0")
    assert (s.max_body_bytes, s.tolerance) == (2048, 60)


def test_secrets_stay_out_of_repr_and_errors() -> None:
    s = WebSettings.from_env({"WAKEFUL_GITHUB_SECRETS": "supersecret", "WAKEFUL_APPROVAL_SECRET": "k"})
    assert "supersecret" not in repr(s)
    with pytest.raises(SettingsError) as info:
        WebSettings.from_env({"WAKEFUL_WEBHOOK_SECRETS": "whsec_%%%notbase64%%%"})
    assert "notbase64" not in str(info.value)
    assert "WAKEFUL_WEBHOOK_SECRETS" in str(info.value)


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_bad_numbers(value: str) -> None:
    with pytest.raises(SettingsError, match="WAKEFUL_WEB_MAX_BODY"):
        WebSettings.from_env({"WAKEFUL_WEB_MAX_BODY": value})


def test_listen_address() -> None:
    assert WebSettings.from_env({}).listen == ("127.0.0.1", 8000)
    assert WebSettings.from_env({"PORT": "9000"}).listen == ("127.0.0.1", 9000)
    assert WebSettings.from_env({"WAKEFUL_WEB_HOST": "0.0.0.0", "WAKEFUL_WEB_PORT": "8080", "PORT": "1"}).listen == ("0.0.0.0", 8080)
