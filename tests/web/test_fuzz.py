"""Property-based fuzzing of headers, bodies and paths (hypothesis), in-process, against a
real store: never a 5xx, never an event for refused input, and what is accepted is stored
exactly as sent."""

from __future__ import annotations

import json
import math
import uuid
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from web_support import GITHUB_SECRET, STRIPE_SECRET, WEBHOOK_SECRET, Client
from store import Store
from web_signing import github_headers, standard_headers, stripe_headers

FUZZ = hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60)
signature_names = ["x-hub-signature-256", "x-github-delivery", "x-github-event", "stripe-signature",
                   "webhook-id", "webhook-timestamp", "webhook-signature", "content-length-ish"]
content_types = st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain",
                                 "application/json; charset=utf-16", "", "multipart/form-data"])

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=25,
)
hazards = st.sampled_from([
    b'{"a": "\\u0000"}', b'{"a": "\\udc80"}', b'{"a": ' + b"[" * 70 + b"]" * 70 + b"}",
    b'{"a": ' + b"9" * 80 + b"}", b'{"a": NaN}', b"\xc3\x28", b"", b"[]", b'{"a": 1e400}',
    b'{"a": 1,}', b"\xef\xbb\xbf{}",
])
bodies = (
    st.binary(max_size=200)
    | st.dictionaries(st.text(max_size=8), json_values, max_size=5).map(lambda v: json.dumps(v).encode())
    | st.dictionaries(st.text(max_size=8), json_values, max_size=5).map(
        lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    | hazards
)


def same(stored: object, sent: object) -> bool:
    """Equal as JSON values. PostgreSQL's jsonb keeps numbers as numeric, so a float such as
    6.672873650282145e+16 comes back as the integer 66728736502821450: equal to 15 digits."""
    if isinstance(sent, float) and isinstance(stored, (int, float)) and not isinstance(stored, bool):
        return math.isclose(stored, sent, rel_tol=1e-15, abs_tol=0.0)
    if isinstance(sent, dict) and isinstance(stored, dict):
        return sent.keys() == stored.keys() and all(same(stored[k], sent[k]) for k in sent)
    if isinstance(sent, list) and isinstance(stored, list):
        return len(sent) == len(stored) and all(same(a, b) for a, b in zip(stored, sent))
    return type(stored) is type(sent) and stored == sent


@FUZZ
@given(kind=st.sampled_from(["github", "stripe", "standard"]),
       headers=st.dictionaries(st.sampled_from(signature_names), printable, max_size=6),
       content_type=content_types, body=bodies)
def test_unsigned_fuzz_is_always_refused_and_stores_nothing(client: Client, web_store: Store, inbox: str,
                                                            kind: str, headers: dict[str, str],
                                                            content_type: str, body: bytes) -> None:
    r = client.post(f"/hooks/{kind}/{inbox}", content=body, headers=headers | {"content-type": content_type})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert web_store.events(inbox) == []


@FUZZ
@given(kind=st.sampled_from(["github", "stripe", "standard"]), body=bodies,
       delivery=st.text(min_size=1, max_size=300).filter(lambda s: s.isprintable() and s.isascii() and s.strip() == s))
def test_signed_fuzz_never_5xx_and_stores_only_what_it_accepts(client: Client, web_store: Store, clock, kind: str,
                                                               body: bytes, delivery: str) -> None:  # type: ignore[no-untyped-def]
    inbox = f"fz-{uuid.uuid4().hex[:12]}"
    if kind == "github":
        headers = github_headers(GITHUB_SECRET, body, delivery=delivery)
    elif kind == "stripe":
        headers = stripe_headers(STRIPE_SECRET, body, t=int(clock.now))
    else:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return  # the reference library cannot sign non-UTF-8 bytes (nor can any sender)
        headers = standard_headers(WEBHOOK_SECRET, body, msg_id=delivery, t=int(clock.now))
    r = client.post(f"/hooks/{kind}/{inbox}", content=body, headers=headers)
    assert r.status_code < 500, (r.status_code, r.text)
    stored = web_store.events(inbox)
    if r.status_code in (200, 202):
        [event] = stored
        assert same(event.payload["body"], json.loads(body))
    else:
        assert 400 <= r.status_code < 500
        assert stored == []


@FUZZ
@given(inbox=st.text(min_size=1, max_size=200))
def test_any_inbox_name_in_the_path(client: Client, web_store: Store, inbox: str) -> None:
    body = b'{"a": 1}'
    r = client.post(f"/hooks/github/{quote(inbox, safe='')}", content=body, headers=github_headers(GITHUB_SECRET, body))
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code == 202:
        assert len(web_store.events(r.json()["inbox"])) >= 1
