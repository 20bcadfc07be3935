"""The proxy's pure parts: the streaming scrubber, the routes config, the path rules, the
settings; and a bad config stopping the real `wakeful proxy` before it listens."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from wakeful.proxy.app import target_of
from wakeful.proxy.routes import Rule, RoutesError, parse
from wakeful.proxy.scrub import REDACTED, Scrubber, Secrets
from wakeful.settings import ProxySettings, SettingsError

SECRETS = ["sk-ant-api03-AbC/def+123456789", "shop-token-0123456789abcdef"]
COMPILED = Secrets.of(SECRETS)  # as the proxy does: once (tens of ms), not per response


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"hello ", b"sk-ant", b"-api03-AbC", b"\\/", b"/def+", b"123456789",
                                 b"shop-token-", b"0123456789abcdef", SECRETS[0].encode(), SECRETS[1].encode(),
                                 b"sk-ant-api03-AbC\\/def+123456789", b"\n\n"]), max_size=30),
       st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_no_secret_survives_any_chunking(parts: list[bytes], cuts: list[int]) -> None:
    data = b"".join(parts)
    scrubber = Scrubber(COMPILED)
    out = b"".join(scrubber.feed(chunk) for chunk in _chunked(data, cuts)) + scrubber.finish()
    whole = Scrubber(COMPILED)
    assert out == whole.feed(data) + whole.finish()  # the chunking changes nothing
    for secret in SECRETS:
        assert secret.encode() not in out and secret.replace("/", "\\/").encode() not in out
    assert out.count(REDACTED) >= data.count(SECRETS[1].encode())


def test_the_scrubber_holds_back_only_a_possible_start_of_a_secret() -> None:
    scrubber = Scrubber(["abcdefgh12"])
    assert scrubber.feed(b"data: xyz abc") == b"data: xyz "  # "abc" may begin the secret
    assert scrubber.feed(b"defgh12 tail") == REDACTED + b" tail"
    assert scrubber.feed(b"abcX") == b"abcX"
    assert scrubber.finish() == b""
    assert Scrubber([]).feed(b"abc") == b"abc"
    assert Scrubber(["abcdefgh12"]).whole(b"Bearer abcdefgh12") == b"Bearer " + REDACTED


@pytest.mark.parametrize("secret", ["sk-ant-api03-AbC/def+123456789", "p&<>\"'x-se cret"])
def test_a_secret_is_scrubbed_in_every_encoding_and_any_mix_of_them(secret: str) -> None:
    """Issue 23 item 5: URL-encoded (either hex case, + for a space), JSON \\u escapes of some
    or all characters, HTML entities (decimal, hex, leading zeros, names), mixed per character."""
    import html
    import json
    from urllib.parse import quote, quote_plus

    forms = {
        "url": quote(secret, safe=""), "url-plus": quote_plus(secret),
        "url-lower": "".join(f"%{ord(c):02x}" for c in secret),
        "json": json.dumps(secret)[1:-1], "json-all": "".join(f"\\u{ord(c):04X}" for c in secret),
        "html": html.escape(secret), "html-all": "".join(f"&#{ord(c)};" for c in secret),
        "html-hex": "".join(f"&#x{ord(c):04x};" for c in secret),
        "named": secret.replace("&", "&amp;").replace("<", "&lt;").replace("/", "&sol;").replace("'", "&apos;"),
        "mixed": "".join((c, f"%{ord(c):02X}", f"\\u{ord(c):04x}", f"&#{ord(c):03d};")[i % 4]
                         for i, c in enumerate(secret)),
    }
    compiled = Secrets.of([secret])
    for name, form in forms.items():
        out = Scrubber(compiled).whole(b"<" + form.encode() + b">")
        assert out == b"<" + REDACTED + b">", name
        data = b"x " + form.encode() + b" y"
        for cut in range(len(data) + 1):  # split at every byte: held back, never leaked
            scrubber = Scrubber(compiled)
            assert scrubber.feed(data[:cut]) + scrubber.feed(data[cut:]) + scrubber.finish() == (
                b"x " + REDACTED + b" y"), (name, cut)


def test_the_scrubber_leaves_near_misses_alone() -> None:
    scrubber = Scrubber(["abcdefgh12"])
    for text in (b"abcdefgh1", b"%61bcdefgh1", b"ABCDEFGH12", b"abcdefgh%313", b"&#97bcdefgh12"):
        assert scrubber.whole(text) == text, text


def test_a_route_passes_the_headers_it_names_and_the_usual_ones_only() -> None:
    from starlette.datastructures import Headers

    from wakeful.proxy.app import passed_headers

    [route] = parse({"shop": _route(pass_headers=["Shop-Version"])}, "a.toml", ENV).values()
    sent = Headers(raw=[(k.encode(), b"v") for k in ("shop-version", "content-type", "anthropic-beta", "x-api-key",
                                                   "x-http-method-override", "x-stainless-os", "other-version")])
    assert [k for k, _ in passed_headers(sent, route)] == [b"shop-version", b"content-type", b"anthropic-beta"]


def _route(**spec: object) -> dict[str, object]:
    return {"upstream": "https://api.example.com/v1", "secret_env": "TOKEN", "allow": ["GET /orders/"], **spec}


ENV = {"TOKEN": "t0ken-value-123"}


def test_a_route_parses_with_its_defaults() -> None:
    [route] = parse({"shop": _route(allow=["GET /orders/", "POST /refunds"])}, "a.toml", ENV).values()
    assert route.upstream == "https://api.example.com/v1" and route.credential() == (
        "authorization", "Bearer t0ken-value-123")
    assert route.allows("GET", "/orders/1") and not route.allows("GET", "/orders")
    assert route.allows("POST", "/refunds") and route.allows("POST", "/refunds/7")
    assert not route.allows("POST", "/refunds-all") and not route.allows("GET", "/refunds")
    assert "t0ken" not in repr(route)
    [raw] = parse({"m": _route(header="x-api-key")}, "a.toml", ENV).values()
    assert raw.credential() == ("x-api-key", "t0ken-value-123")
    assert Rule("GET", "/").allows("GET", "/anything")


@pytest.mark.parametrize("spec, words", [
    (_route(upstream="ftp://x"), "upstream must be an http"),
    (_route(upstream="https://u:p@x.com"), "credentials"),
    (_route(allow=[]), "allow must be a non-empty list"),
    (_route(allow=["FETCH /x"]), "METHOD /path-prefix"),
    (_route(allow=["GET orders"]), "METHOD /path-prefix"),
    (_route(allow=["GET /a/../b"]), "plain path"),
    (_route(secret_env="MISSING"), "MISSING is not set"),
    ({"upstream": "https://x", "secret_file": "/nonexistent/secret", "allow": ["GET /"]}, "cannot read the file"),
    (_route(header="Host"), "header must be"),
    (_route(colour="red"), "unknown key(s) colour"),
    (_route(pass_headers=["X-HTTP-Method-Override"]), "pass_headers may not name x-http-method-override"),
    (_route(pass_headers=["Authorization"]), "pass_headers may not name authorization"),
    (_route(pass_headers="Shop-Version"), "pass_headers must be a list"),
    ({"upstream": "https://x", "allow": ["GET /"]}, "exactly one of secret_env or secret_file"),
])
def test_a_bad_route_is_named_in_a_clear_error(spec: dict[str, object], words: str) -> None:
    with pytest.raises(RoutesError) as error:
        parse({"shop": spec}, "agent.toml", ENV)
    assert "agent.toml: [routes.shop]" in str(error.value) and words in str(error.value)
    assert "t0ken" not in str(error.value)


def test_a_short_secret_and_no_routes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RoutesError, match="at least 8"):
        parse({"shop": _route()}, "a.toml", {"TOKEN": "short"})
    with pytest.raises(RoutesError, match="no \\[routes.NAME\\] table"):
        parse(None, "a.toml", ENV)
    (tmp_path / "key").write_text("file-secret-value\n")
    spec = {"upstream": "http://x", "secret_file": str(tmp_path / "key"), "allow": ["GET /"]}
    [route] = parse({"shop": spec}, "a.toml", ENV).values()
    assert route.secret == "file-secret-value"


@pytest.mark.parametrize("raw, route, path", [
    (b"/shop/orders/1", "shop", "/orders/1"),
    (b"/shop", "shop", "/"),
    (b"/shop/", "shop", "/"),
    (b"/shop/orders/a%20b", "shop", "/orders/a b"),
    (b"/shop/orders/", "shop", "/orders/"),
    (b"/shop/orders/../admin", "shop", None),
    (b"/shop/orders/%2e%2e/admin", "shop", None),
    (b"/shop/orders/..%2fadmin", "shop", None),
    (b"/shop/a%5c..", "shop", None),
    (b"/shop/a%252e", "shop", None),
    (b"/shop//admin", "shop", None),
    (b"/shop/./orders", "shop", None),
    (b"/shop/%ff%fe", "shop", None),
    (b"/sh%6fp/x", "shop", "/x"),
])
def test_paths_with_dot_empty_or_hidden_segments_have_no_decoded_form(raw: bytes, route: str,
                                                                      path: str | None) -> None:
    target = target_of(raw)
    assert (target.route, target.path) == (route, path)


def test_settings_come_from_the_environment_with_clear_errors() -> None:
    s = ProxySettings.from_env({"WAKEFUL_PROXY_URL": "http://0.0.0.0:9000/", "WAKEFUL_PROXY_READ_TIMEOUT": "2.5"})
    assert (s.listen, s.read_timeout, s.url) == (("0.0.0.0", 9000), 2.5, "http://0.0.0.0:9000")
    assert ProxySettings.from_env({}).listen == ("127.0.0.1", 8780)
    for env, words in (({"WAKEFUL_PROXY_URL": "https://x:1"}, "WAKEFUL_PROXY_URL must be http"),
                       ({"WAKEFUL_PROXY_MAX_RESPONSE_BYTES": "lots"}, "WAKEFUL_PROXY_MAX_RESPONSE_BYTES"),
                       ({"WAKEFUL_PROXY_CONNECT_TIMEOUT": "0"}, "must be positive")):
        with pytest.raises(SettingsError, match=words):
            ProxySettings.from_env(env)


def test_a_bad_routes_table_stops_the_proxy_process_before_it_listens(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[routes.shop]\nupstream = "https://shop.example.com"\nsecret_env = "NOT_SET_ANYWHERE"\n'
                      'allow = ["GET /orders/"]\n')
    wakeful = str(Path(sys.executable).parent / "wakeful")
    done = subprocess.run([wakeful, "proxy"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "WAKEFUL_AGENT_CONFIG": str(config),
                               "WAKEFUL_HOME": str(tmp_path)})
    assert done.returncode == 2
    assert "[routes.shop]" in done.stderr and "NOT_SET_ANYWHERE is not set" in done.stderr


def test_the_worker_finds_the_proxy_by_its_url() -> None:
    from wakeful.agent.egress import proxy_url

    assert proxy_url({}) == "http://127.0.0.1:8780" == ProxySettings().url
    assert proxy_url({"WAKEFUL_PROXY_URL": "http://proxy:8780/"}) == "http://proxy:8780"


def test_wakeful_proxy_check_lists_the_routes_without_their_secrets(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[routes.shop]\nupstream = "https://shop.example.com/api"\nsecret_env = "SHOP_TOKEN"\n'
                      'allow = ["GET /orders/", "POST /refunds"]\n')
    wakeful = str(Path(sys.executable).parent / "wakeful")
    env = {"PATH": "/usr/bin:/bin", "WAKEFUL_AGENT_CONFIG": str(config), "WAKEFUL_HOME": str(tmp_path),
           "SHOP_TOKEN": "the-shop-secret-value"}
    done = subprocess.run([wakeful, "proxy", "--check"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "shop: https://shop.example.com/api (authorization; allow GET /orders/, POST /refunds)" in done.stdout
    assert "the-shop-secret-value" not in done.stdout + done.stderr
