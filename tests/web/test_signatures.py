"""Signature checks against published vectors and headers built the way senders build them.
No store needed: these are the pure functions the receivers call first."""

from __future__ import annotations

import base64
import time

import pytest
from hypothesis import given, settings as hsettings, strategies as st
from standardwebhooks.webhooks import Webhook

from wakeful.web.refusals import Refused
from wakeful.web.signatures import verify_github, verify_standard, verify_stripe
from web_signing import github_headers, standard_headers, stripe_headers

NOW = 1_700_000_000

# GitHub's published test vector (docs: "Validating webhook deliveries").
GH_SECRET = "It's a Secret to Everybody"
GH_BODY = b"Hello, World!"
GH_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

# The Standard Webhooks reference vector (the spec's libraries test this exact triple).
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def refused(code: str, fn, *args, **kwargs) -> Refused:  # type: ignore[no-untyped-def]
    with pytest.raises(Refused) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


# --- GitHub ---------------------------------------------------------------------------

def test_github_published_vector() -> None:
    verify_github(GH_BODY, {"x-hub-signature-256": GH_SIGNATURE}, [GH_SECRET])


def test_github_vector_with_rotated_secrets_in_any_order() -> None:
    verify_github(GH_BODY, {"x-hub-signature-256": GH_SIGNATURE}, ["new-secret", GH_SECRET])
    verify_github(GH_BODY, {"x-hub-signature-256": GH_SIGNATURE}, [GH_SECRET, "new-secret"])


@pytest.mark.parametrize("header", [
    GH_SIGNATURE[:-1] + "f",  # one hex digit off
    GH_SIGNATURE.upper(),  # scheme must be sha256=
    "sha1=" + GH_SIGNATURE[7:],
    "sha256=",
    "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
    "sha256=ü" + GH_SIGNATURE[8:],
])
def test_github_wrong_signatures(header: str) -> None:
    refused("bad_signature", verify_github, GH_BODY, {"x-hub-signature-256": header}, [GH_SECRET])


def test_github_body_changed() -> None:
    refused("bad_signature", verify_github, GH_BODY + b" ", {"x-hub-signature-256": GH_SIGNATURE}, [GH_SECRET])


def test_github_missing_header_and_missing_secret() -> None:
    refused("no_signature", verify_github, GH_BODY, {}, [GH_SECRET])
    refused("no_secret", verify_github, GH_BODY, {"x-hub-signature-256": GH_SIGNATURE}, [])


def test_github_helper_matches_vector() -> None:
    assert github_headers(GH_SECRET, GH_BODY)["x-hub-signature-256"] == GH_SIGNATURE


# --- Stripe ---------------------------------------------------------------------------

STRIPE_SECRET = "whsec_test_stripe"
STRIPE_BODY = b'{"id": "evt_1", "type": "invoice.paid"}'


def test_stripe_header_built_like_stripe() -> None:
    headers = stripe_headers(STRIPE_SECRET, STRIPE_BODY, t=NOW)
    verify_stripe(STRIPE_BODY, headers, [STRIPE_SECRET], now=NOW, tolerance=300)


@pytest.mark.parametrize("skew", [-300, -1, 0, 1, 300])
def test_stripe_inside_tolerance_both_ways(skew: int) -> None:
    headers = stripe_headers(STRIPE_SECRET, STRIPE_BODY, t=NOW + skew)
    verify_stripe(STRIPE_BODY, headers, [STRIPE_SECRET], now=NOW, tolerance=300)


@pytest.mark.parametrize("skew", [-301, 301, -86400, 86400 * 365])
def test_stripe_replay_outside_tolerance_either_way(skew: int) -> None:
    headers = stripe_headers(STRIPE_SECRET, STRIPE_BODY, t=NOW + skew)
    refused("stale_timestamp", verify_stripe, STRIPE_BODY, headers, [STRIPE_SECRET], now=NOW, tolerance=300)


def test_stripe_rotation_both_sides() -> None:
    # Stripe sends one v1 per active endpoint secret while it rolls them.
    old = stripe_headers("whsec_old", STRIPE_BODY, t=NOW)["stripe-signature"]
    v1_old = [p for p in old.split(",") if p.startswith("v1=")][0][3:]
    headers = stripe_headers("whsec_new", STRIPE_BODY, t=NOW, extra_v1=[v1_old])
    verify_stripe(STRIPE_BODY, headers, ["whsec_old"], now=NOW, tolerance=300)
    verify_stripe(STRIPE_BODY, headers, ["whsec_new"], now=NOW, tolerance=300)
    # we hold two secrets, the sender signs with one of them
    one = stripe_headers("whsec_old", STRIPE_BODY, t=NOW)
    verify_stripe(STRIPE_BODY, one, ["whsec_new", "whsec_old"], now=NOW, tolerance=300)
    refused("bad_signature", verify_stripe, STRIPE_BODY, one, ["whsec_other"], now=NOW, tolerance=300)


def test_stripe_signature_does_not_cover_another_timestamp() -> None:
    headers = stripe_headers(STRIPE_SECRET, STRIPE_BODY, t=NOW)
    forged = headers["stripe-signature"].replace(f"t={NOW}", f"t={NOW + 5}")
    refused("bad_signature", verify_stripe, STRIPE_BODY, {"stripe-signature": forged}, [STRIPE_SECRET],
            now=NOW, tolerance=300)


@pytest.mark.parametrize("header,code", [
    ("", "no_signature"),
    ("v1=abc", "bad_signature"),  # no t
    (f"t={NOW},t={NOW},v1=abc", "bad_signature"),
    (f"t={NOW}", "no_signature"),
    (f"t={NOW},v0=abc", "no_signature"),
    ("t=abc,v1=abc", "bad_signature"),
    ("t=-5,v1=abc", "bad_signature"),
    ("t=" + "9" * 5000 + ",v1=abc", "bad_signature"),
    ("t=１２３,v1=abc", "bad_signature"),  # non-ASCII digits
    (f"t={NOW},v1=ü", "bad_signature"),
    (",,,=,", "bad_signature"),
])
def test_stripe_malformed_headers(header: str, code: str) -> None:
    refused(code, verify_stripe, STRIPE_BODY, {"stripe-signature": header}, [STRIPE_SECRET], now=NOW, tolerance=300)


def test_stripe_no_secret() -> None:
    refused("no_secret", verify_stripe, STRIPE_BODY, stripe_headers("x", STRIPE_BODY, t=NOW), [],
            now=NOW, tolerance=300)


# --- Standard Webhooks ------------------------------------------------------------------

def sw_headers(signature: str = SW_SIGNATURE, ts: int = SW_TIMESTAMP, msg_id: str = SW_ID) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signature}


def test_standard_reference_vector() -> None:
    verify_standard(SW_BODY, sw_headers(), [SW_SECRET], now=SW_TIMESTAMP, tolerance=300)
    # and the reference library agrees it is the signature of this triple
    from datetime import datetime, timezone
    stamp = datetime.fromtimestamp(SW_TIMESTAMP, tz=timezone.utc)
    assert Webhook(SW_SECRET).sign(SW_ID, stamp, SW_BODY.decode()) == SW_SIGNATURE


def test_standard_agrees_with_reference_library_verify() -> None:
    now = int(time.time())
    headers = standard_headers(SW_SECRET, SW_BODY, t=now)
    Webhook(SW_SECRET).verify(SW_BODY, headers)
    verify_standard(SW_BODY, headers, [SW_SECRET], now=now, tolerance=300)


def test_standard_secret_without_prefix() -> None:
    verify_standard(SW_BODY, sw_headers(), [SW_SECRET[len("whsec_"):]], now=SW_TIMESTAMP, tolerance=300)


def test_standard_rotation() -> None:
    other = "whsec_" + base64.b64encode(b"another key of 24 bytes!").decode()
    # the sender signs with two secrets (space-separated); we know either one
    other_sig = standard_headers(other, SW_BODY, msg_id=SW_ID, t=SW_TIMESTAMP)["webhook-signature"]
    both = sw_headers(f"v1a,unknown {other_sig} {SW_SIGNATURE}")
    verify_standard(SW_BODY, both, [SW_SECRET], now=SW_TIMESTAMP, tolerance=300)
    verify_standard(SW_BODY, both, [other], now=SW_TIMESTAMP, tolerance=300)
    # we hold two, the sender signs with one
    verify_standard(SW_BODY, sw_headers(), [other, SW_SECRET], now=SW_TIMESTAMP, tolerance=300)
    refused("bad_signature", verify_standard, SW_BODY, sw_headers(other_sig), [SW_SECRET],
            now=SW_TIMESTAMP, tolerance=300)


@pytest.mark.parametrize("skew", [-301, 301, -3600, 10**6])
def test_standard_replay_outside_tolerance_either_way(skew: int) -> None:
    refused("stale_timestamp", verify_standard, SW_BODY, sw_headers(), [SW_SECRET],
            now=SW_TIMESTAMP + skew, tolerance=300)


def test_standard_reference_library_bounds_the_future_too() -> None:
    # Why we may rely on the same 300 s both ways as the library: it refuses "too new".
    from standardwebhooks.webhooks import WebhookVerificationError
    future = int(time.time()) + 600
    headers = standard_headers(SW_SECRET, SW_BODY, t=future)
    with pytest.raises(WebhookVerificationError, match="too new"):
        Webhook(SW_SECRET).verify(SW_BODY, headers)
    refused("stale_timestamp", verify_standard, SW_BODY, headers, [SW_SECRET], now=future - 600, tolerance=300)


@pytest.mark.parametrize("headers,code", [
    ({}, "no_signature"),
    ({"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP)}, "no_signature"),
    (sw_headers(ts=0) | {"webhook-timestamp": "1614265330.5"}, "bad_signature"),
    (sw_headers() | {"webhook-timestamp": "nan"}, "bad_signature"),
    (sw_headers("v1"), "bad_signature"),
    (sw_headers("v1,not base64!"), "bad_signature"),
    (sw_headers("v1,a,b,c"), "bad_signature"),
    (sw_headers("v2," + SW_SIGNATURE[3:]), "bad_signature"),
    (sw_headers(msg_id="msg_other"), "bad_signature"),
])
def test_standard_malformed_headers(headers: dict[str, str], code: str) -> None:
    refused(code, verify_standard, SW_BODY, headers, [SW_SECRET], now=SW_TIMESTAMP, tolerance=300)


def test_standard_non_utf8_body_is_a_bad_signature_not_a_crash() -> None:
    refused("bad_signature", verify_standard, b"\xff\xfe", sw_headers(), [SW_SECRET], now=SW_TIMESTAMP, tolerance=300)


# --- any header value a sender can craft ends in Refused ---------------------------------

header_text = st.text(st.characters(codec="latin-1"), max_size=80)


@hsettings(max_examples=300, deadline=None)
@given(sig=header_text, ts=header_text, msg_id=header_text, body=st.binary(max_size=64))
def test_crafted_headers_only_ever_refuse(sig: str, ts: str, msg_id: str, body: bytes) -> None:
    for verify, headers, kwargs in (
        (verify_github, {"x-hub-signature-256": sig}, {}),
        (verify_stripe, {"stripe-signature": sig + ",t=" + ts}, {"now": NOW, "tolerance": 300}),
        (verify_standard, {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": sig},
         {"now": NOW, "tolerance": 300}),
    ):
        with pytest.raises(Refused):
            verify(body, headers, ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], **kwargs)
