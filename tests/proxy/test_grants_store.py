"""store/grants.py on both engines: grants die with the lease generation (run grants) or the
effect's attempt (effect grants), expire, cover only their routes; the audit keeps who and
where, never headers or bodies."""

from __future__ import annotations

import pytest

from store import Effect, Outcome, Store
from store import grants as grant_rules
from store.effects import Effects
from store.grants import TOKEN_PREFIX, GrantCheck, token_hash
from store.tables import grants

T = 1_000_000


def _lease(store: Store, inbox: str = "a", holder: str = "w1", now: int = T) -> int:
    gen = store.acquire(inbox, holder, now=now)
    assert gen is not None
    return gen


def test_a_run_grant_works_while_its_generation_holds_the_lease(store: Store) -> None:
    gen = _lease(store)
    token = store.grants.mint("a", "w1", gen, ["anthropic", "shop"], 600, now=T)
    assert token is not None and token.startswith(TOKEN_PREFIX)
    ok = store.grants.check(token, "shop", now=T + 10)
    assert ok == GrantCheck(200, "ok", "a", gen, None) and ok.allowed
    assert store.grants.check(token, "bank", now=T + 10).outcome == "route_not_granted"
    # another worker takes the inbox over once the lease lapsed: the old grant is dead at once
    ttl = store.settings.lease_ttl
    assert store.acquire("a", "w2", now=T + ttl + 1) == gen + 1
    fenced = store.grants.check(token, "shop", now=T + ttl + 2)
    assert (fenced.status, fenced.outcome, fenced.generation) == (403, "fenced", gen)


def test_a_lapsed_or_released_lease_fences_its_grant(store: Store) -> None:
    gen = _lease(store)
    token = store.grants.mint("a", "w1", gen, ["shop"], 10_000, now=T)
    assert store.grants.check(token, "shop", now=T + store.settings.lease_ttl + 1).outcome == "fenced"
    assert store.release("a", "w1", gen, now=T + 1)
    assert store.grants.check(token, "shop", now=T + 2).outcome == "fenced"


def test_only_the_live_holder_mints_a_run_grant(store: Store) -> None:
    gen = _lease(store)
    assert store.grants.mint("a", "w2", gen, ["shop"], 600, now=T) is None  # not the holder
    assert store.grants.mint("a", "w1", gen + 1, ["shop"], 600, now=T) is None  # not its generation
    assert store.grants.mint("b", "w1", gen, ["shop"], 600, now=T) is None  # no lease at all
    assert store.grants.mint("a", "w1", gen, ["shop"], 600, now=T + store.settings.lease_ttl + 1) is None
    with store.engine.connect() as conn:
        assert conn.execute(grants.select()).all() == []


def test_expired_forged_and_missing_grants(store: Store) -> None:
    gen = _lease(store)
    token = store.grants.mint("a", "w1", gen, ["shop"], 30, now=T)
    assert store.grants.check(token, "shop", now=T + 30).allowed
    assert (store.grants.check(token, "shop", now=T + 31).status,
            store.grants.check(token, "shop", now=T + 31).outcome) == (403, "expired")
    assert store.grants.check(None, "shop", now=T) == GrantCheck(401, "no_grant")
    assert store.grants.check("", "shop", now=T).status == 401
    for forged in (token[:-1] + ("A" if token[-1] != "A" else "B"), "sk-ant-real-looking", TOKEN_PREFIX + "x" * 500):
        assert store.grants.check(forged, "shop", now=T) == GrantCheck(403, "forged")


def test_the_store_keeps_only_the_tokens_hash(store: Store) -> None:
    token = store.grants.mint("a", "w1", _lease(store), ["shop"], 60, now=T)
    with store.engine.connect() as conn:
        [row] = conn.execute(grants.select()).all()
    assert row.token_hash == token_hash(token) and token not in repr(tuple(row))


def test_minting_clears_the_inboxs_expired_grants(store: Store) -> None:
    gen = _lease(store)
    for _ in range(3):
        assert store.grants.mint("a", "w1", gen, ["shop"], 5, now=T)
    assert store.grants.mint("a", "w1", gen, ["shop"], 5, now=T + 6)
    with store.engine.connect() as conn:
        assert len(conn.execute(grants.select()).all()) == 1


def test_bad_mint_input_is_refused_before_anything_is_stored(store: Store) -> None:
    gen = _lease(store)
    for routes, ttl in (([], 60), (["shop"], 0), ("shop", 60), ([""], 60), (["shop"], True)):
        with pytest.raises(ValueError):
            store.grants.mint("a", "w1", gen, routes, ttl, now=T)


def _effect(store: Store, inbox: str = "a") -> tuple[int, Effects]:
    store.ingest(inbox, "chat", "m1", {"text": "refund"}, now=T)
    gen = _lease(store, inbox)
    batch = store.claim(inbox, "w1", gen, now=T)
    assert store.finish(inbox, "w1", gen, [e.id for e in batch],
                        outcome=Outcome(effects=[Effect("tu1", "refund", {"order": 1})]), now=T)
    assert store.release(inbox, "w1", gen, now=T)
    return gen, store.effects


def test_an_effect_grant_lives_while_its_attempt_executes(store: Store) -> None:
    gen, fx = _effect(store)
    assert store.grants.mint("a", "exec1", gen, ["shop"], 300, tool_use_id="tu1", attempt=1, now=T + 1) is None
    took = fx.begin("a", "tu1", stale_after=60, now=T + 1)
    assert took is not None and took.attempts == 1
    token = store.grants.mint("a", "exec1", gen, ["shop"], 300, tool_use_id="tu1", attempt=1, now=T + 1)
    assert token is not None
    # the lease was released after the commit: an effect's grant does not need it
    assert store.grants.check(token, "shop", now=T + 2) == GrantCheck(200, "ok", "a", gen, "tu1")
    # the executor went silent; another takes the effect again (at-least-once): the old
    # attempt's grant is dead, the new attempt's works
    again = fx.begin("a", "tu1", stale_after=60, now=T + 100)
    assert again is not None and again.attempts == 2
    assert store.grants.check(token, "shop", now=T + 101).outcome == "effect_done"
    token2 = store.grants.mint("a", "exec2", gen, ["shop"], 300, tool_use_id="tu1", attempt=2, now=T + 101)
    assert store.grants.check(token2, "shop", now=T + 102).allowed
    assert fx.record("a", "tu1", 2, {"content": "ok", "is_error": False}, now=T + 103)
    assert store.grants.check(token2, "shop", now=T + 104).outcome == "effect_done"


def test_an_effect_grant_needs_the_generation_that_committed_it(store: Store) -> None:
    gen, fx = _effect(store)
    fx.begin("a", "tu1", stale_after=60, now=T + 1)
    assert store.grants.mint("a", "exec", gen + 1, ["shop"], 300, tool_use_id="tu1", now=T + 1) is None
    assert store.grants.mint("a", "exec", gen, ["shop"], 300, tool_use_id="nope", now=T + 1) is None


def test_the_audit_keeps_who_and_where_and_counts_what_went_wrong(store: Store) -> None:
    gen = _lease(store)
    token = store.grants.mint("a", "w1", gen, ["shop"], 600, now=T)
    ok = store.grants.check(token, "shop", now=T)
    store.grants.record_egress(ok, "shop", "GET", "/orders/1", 200, 120, 15, now=T + 1)
    store.grants.record_egress(GrantCheck(401, "no_grant"), "shop", "GET", "/orders/2", 401, now=T + 2)
    store.grants.record_egress(ok, "shop", "POST", "/refunds", 403, outcome="path_not_allowed", now=T + 3)
    store.grants.record_egress(ok, "shop", "GET", "/slow", 504, outcome="upstream_timeout", now=T + 4)
    entries = store.grants.audit("a")
    assert [(e.method, e.path, e.status, e.outcome, e.generation) for e in entries] == [
        ("GET", "/orders/1", 200, "ok", gen), ("POST", "/refunds", 403, "path_not_allowed", gen),
        ("GET", "/slow", 504, "upstream_timeout", gen)]
    assert (entries[0].bytes, entries[0].duration_ms, entries[0].at) == (120, 15, T + 1)
    assert len(store.grants.audit()) == 4 and [e.inbox for e in store.grants.audit(limit=1)] == ["a"]
    assert store.operator.metrics(now=T)["proxy_not_ok"] == {
        "shop": {"no_grant": 1, "path_not_allowed": 1, "upstream_timeout": 1}}


def test_retention_purges_old_audit_rows(store: Store) -> None:
    store.grants.record_egress(GrantCheck(401, "no_grant"), "shop", "GET", "/old", 401, now=T)
    store.grants.record_egress(GrantCheck(401, "no_grant"), "shop", "GET", "/new", 401, now=T + 5000)
    gen = _lease(store, "b", now=T + 4000)
    assert store.grants.mint("b", "w1", gen, ["shop"], 30, now=T + 4000)
    counts = store.purge(older_than=1000, now=T + 5000)
    assert counts["audit"] == 1 and counts["grants"] == 1
    assert [e.path for e in store.grants.audit()] == ["/new"]


def test_a_hostile_route_or_path_is_recorded_not_lost(store: Store) -> None:
    store.grants.record_egress(GrantCheck(401, "no_grant"), "sh\x00op", "GET", "/a\x00b\udc80" + "x" * 2000, 401, now=T)
    [entry] = store.grants.audit()
    assert entry.route == "sh\\x00op" and entry.path.startswith("/a\\x00b\\udc80x") and len(entry.path) == 1024
    with pytest.raises(ValueError, match="unknown audit outcome"):
        store.grants.record_egress(GrantCheck(401, "no_grant"), "shop", "GET", "/", 401, outcome="fine", now=T)


def test_ungranted_refusals_keep_the_newest_of_each_route_and_outcome(store: Store,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23 item 10: refusals anyone can cause are capped (per route and outcome); a caller
    with a live grant is never capped."""
    monkeypatch.setattr(grant_rules, "UNGRANTED_KEPT", 3)
    gen = _lease(store)
    ok = store.grants.check(store.grants.mint("a", "w1", gen, ["shop"], 600, now=T), "shop", now=T)
    for n in range(6):
        store.grants.record_egress(GrantCheck(403, "forged"), grant_rules.UNKNOWN_ROUTE, "GET", f"/x{n}/y", 403, now=T + n)
        store.grants.record_egress(GrantCheck(401, "no_grant"), "shop", "GET", f"/n{n}", 401, now=T + n)
        store.grants.record_egress(ok, "shop", "GET", f"/admin{n}", 403, outcome="path_not_allowed", now=T + n)
    paths = [e.path for e in store.grants.audit(limit=100)]
    assert [p for p in paths if p.startswith("/x")] == ["/x3/y", "/x4/y", "/x5/y"]
    assert [p for p in paths if p.startswith("/n")] == ["/n3", "/n4", "/n5"]
    assert len([p for p in paths if p.startswith("/admin")]) == 6
    assert store.operator.metrics(now=T)["proxy_not_ok"] == {
        "(unknown)": {"forged": 3}, "shop": {"no_grant": 3, "path_not_allowed": 6}}
