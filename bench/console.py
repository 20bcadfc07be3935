"""``python -m bench.console [--rebuild] [--reps N] [--no-http]``: the operator's console on a
large store.

A PostgreSQL database ``wakeful_bench_console`` is filled once (``--rebuild`` to fill it
again) with 100,000 inboxes and 1,000,000 events over 30 days, and what surrounds them: half a
million runs, 300,000 messages (2,000 held), 20,000 answered approvals with their tool calls
and 500 waiting, a live timer per inbox, spend rows for 14 days, dead events, events waiting
out an outage, leases past their TTL. One inbox, ``ada``, holds 50,000 of the events; another,
``bob``, 10,000, all in the oldest fifth (a busy inbox gone quiet).

Then, warm, ``--reps`` times each: the store's console reads (``store.console.fleet``,
``timeline`` of ``ada`` (first page and the next), of ``bob``, of an ordinary inbox, ``search`` by a
source key), and the same pages over HTTP from a real ``python -m wakeful.web`` with the
console on. Printed: median and worst in ms, then every statement those reads ran with its
plan under EXPLAIN ANALYZE (the indexes it used, any sequential scan) and its time.
Not a test: a figure to read (docs/console.md, "Speed").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import env

DB = "wakeful_bench_console"
INBOXES = 100_000
EVENTS = 1_000_000
SPAN = 30 * 86400
HEAVY = "ada"  # every 20th event
QUIET = "bob"  # 10,000 events, all in the oldest fifth: a once-busy inbox gone quiet
LAPSED = 50  # inboxes whose lease ran past its TTL with a running event
WAITING_APPROVALS = 500
PASSWORD = "bench-console-password"


def _populate(now: int) -> None:
    """The rows, by generate_series: ids in time order, as the store writes them."""
    start, step = now - SPAN, SPAN / EVENTS
    inbox_of = (f"CASE WHEN n % 20 = 0 THEN '{HEAVY}' WHEN n % 20 = 10 AND n <= {EVENTS // 5} THEN '{QUIET}' "
                f"ELSE 'u' || lpad((((n::bigint * 7919) % {INBOXES}) + 1)::text, 6, '0') END")
    statements = [
        f"""INSERT INTO inboxes (inbox, generation, lease_until, last_sent)
            SELECT 'u' || lpad(n::text, 6, '0'), 3, 0, {now} - (n % 86400) FROM generate_series(1, {INBOXES}) n
            UNION ALL SELECT '{HEAVY}', 4000, 0, {now - 60} UNION ALL SELECT '{QUIET}', 900, 0, {now - SPAN}""",
        # Events: mostly done; every 500th dead; the last 5,000 pending (a tenth of them
        # waiting out an outage); every 50th an approval's answer; every 3rd a webhook.
        f"""INSERT INTO events (id, inbox, source, source_id, payload, status, attempts, claim_gen, not_before,
                                waits, outage_since, error, created, claimed_at, finished)
            SELECT n, {inbox_of},
                   CASE WHEN n % 50 = 1 THEN 'approval' WHEN n % 3 = 0 THEN 'github' ELSE 'chat' END,
                   CASE WHEN n % 50 = 1 THEN 'toolu_' || n WHEN n = 4411 THEN '4411' ELSE 'd-' || n END,
                   CASE WHEN n % 50 = 1 THEN jsonb_build_object('approval', 'toolu_' || n, 'answer', 'yes',
                                                                'action', 'refund {{"order": ' || n || '}}', 'by', 'self')
                        ELSE jsonb_build_object('type', 'issue_comment', 'body', jsonb_build_object(
                             'comment', 'Customer ' || n || ' asks where the order is; it was due last week and '
                                        'nobody has answered the two messages sent since.',
                             'number', n)) END,
                   CASE WHEN n > {EVENTS - 5000} THEN 'pending' WHEN n % 500 = 7 THEN 'dead' ELSE 'done' END,
                   CASE WHEN n > {EVENTS - 5000} THEN 0 WHEN n % 500 = 7 THEN 3 ELSE 1 END,
                   CASE WHEN n > {EVENTS - 5000} THEN NULL ELSE 2 END, 0,
                   CASE WHEN n > {EVENTS - 5000} AND n % 10 = 0 THEN 2 ELSE 0 END,
                   CASE WHEN n > {EVENTS - 5000} AND n % 10 = 0 THEN {now - 1800} END,
                   CASE WHEN n % 500 = 7 THEN 'RuntimeError: tool call raised' END,
                   {start} + floor(n * {step})::bigint,
                   CASE WHEN n > {EVENTS - 5000} THEN NULL ELSE {start} + floor(n * {step})::bigint + n % 7 END,
                   CASE WHEN n > {EVENTS - 5000} THEN NULL ELSE {start} + floor(n * {step})::bigint + n % 7 + 2 END
            FROM generate_series(1, {EVENTS}) n""",
        f"SELECT setval(pg_get_serial_sequence('events', 'id'), {EVENTS})",
        # Leases past their TTL, each with an event left running.
        f"""UPDATE inboxes SET holder = 'bench:4242:gone', lease_until = {now - 600}, generation = 4
            WHERE inbox IN (SELECT 'u' || lpad(n::text, 6, '0') FROM generate_series(1, {LAPSED}) n)""",
        f"""INSERT INTO events (inbox, source, source_id, payload, status, attempts, claim_gen, created, claimed_at)
            SELECT 'u' || lpad(n::text, 6, '0'), 'chat', 'stuck-' || n, '{{"text": "still running"}}', 'running',
                   1, 4, {now - 900}, {now - 890} FROM generate_series(1, {LAPSED}) n""",
        # A run per two events, finished seconds after the second one arrived.
        f"""INSERT INTO runs (inbox, generation, holder, started, finished, outcome, event_ids, error)
            SELECT inbox, 2, 'bench:1:w', created + 3, created + 5,
                   CASE WHEN status = 'dead' THEN 'error' ELSE 'done' END,
                   json_build_array(id - 1, id), CASE WHEN status = 'dead' THEN error END
            FROM events WHERE id % 2 = 0 AND id <= {EVENTS - 5000} ORDER BY id""",
        # A message per three events; the last 2,000 held.
        f"""INSERT INTO outbox (inbox, body, urgent, kind, created, sent_at)
            SELECT inbox, 'Your order is on its way; the courier says Thursday. Reply here if it is not.',
                   false, CASE WHEN id % 2 = 0 THEN 'reply' ELSE 'notice' END, created + 6,
                   CASE WHEN id > {EVENTS - 6000} THEN NULL ELSE created + 8 END
            FROM events WHERE id % 3 = 0 ORDER BY id""",
        # Each answer's approval and tool call; then 500 that wait, with their expiry timers.
        f"""INSERT INTO approvals (inbox, request_id, action, deadline, created)
            SELECT inbox, source_id, payload ->> 'action', created + 3600, created - 60
            FROM events WHERE source = 'approval'""",
        f"""INSERT INTO effects (inbox, tool_use_id, tool, input, words, why, idempotency_key, delivery, status,
                                 attempts, generation, result, created, updated)
            SELECT inbox, source_id, 'refund', jsonb_build_object('order', id), 'I will refund it.', '',
                   'wakeful-tool-' || id, 'at-least-once', 'done', 1, 2,
                   '{{"content": "refunded", "is_error": false}}', created - 60, created + 10
            FROM events WHERE source = 'approval'""",
        f"""INSERT INTO approvals (inbox, request_id, action, deadline, created)
            SELECT 'u' || lpad((n * 97 % {INBOXES} + 1)::text, 6, '0'), 'toolu_w' || n, 'refund {{"order": 1}}',
                   {now} + n * 30 - 600, {now} - 3600 FROM generate_series(1, {WAITING_APPROVALS}) n""",
        f"""INSERT INTO effects (inbox, tool_use_id, tool, input, words, why, idempotency_key, delivery, status,
                                 attempts, generation, created, updated)
            SELECT inbox, request_id, 'refund', '{{"order": 1}}', 'I will refund it.', '', 'wakeful-tool-w' || request_id,
                   'at-least-once', 'asked', 0, 2, created, created FROM approvals WHERE request_id LIKE 'toolu_w%'""",
        f"""INSERT INTO timers (inbox, timer_id, due, payload, misfire, done, key_source, key_source_id)
            SELECT inbox, 'approval:' || request_id, deadline, '{{"answer": "expired"}}', 'coalesce', false,
                   'approval', request_id FROM approvals WHERE request_id LIKE 'toolu_w%'""",
        # A daily digest per inbox.
        f"""INSERT INTO timers (inbox, timer_id, due, every, payload, misfire, done)
            SELECT inbox, 'digest', {now} + (n % 86400), 86400, '{{}}', 'coalesce', false
            FROM (SELECT inbox, row_number() OVER () n FROM inboxes) i""",
        # Spend: 5,000 inboxes a day for 14 days, the agent's 16 shards; a few near the ceiling.
        f"""INSERT INTO spend (scope, name, day, shard, calls, input_tokens, output_tokens, cost_nanos,
                               token_ceiling, updated)
            SELECT 'inbox', 'u' || lpad((n * 13 % {INBOXES} + 1)::text, 6, '0'), {now - now % 86400} - d * 86400, 0,
                   4, 8000 + CASE WHEN d = 0 AND n <= 20 THEN 90000 ELSE 0 END, 900, 30000000, 100000, {now}
            FROM generate_series(0, 13) d, generate_series(1, 5000) n""",
        f"""INSERT INTO spend (scope, name, day, shard, calls, input_tokens, output_tokens, cost_nanos, updated)
            SELECT 'agent', 'claude', {now - now % 86400} - d * 86400, s, 1250, 2500000, 280000, 9000000000, {now}
            FROM generate_series(0, 13) d, generate_series(0, 15) s""",
        f"""INSERT INTO operator_actions (at, actor, action, inbox, target, outcome)
            SELECT {now} - n * 3600, 'console:bench', 'requeue', 'u' || lpad(n::text, 6, '0'), n::text, 'requeued'
            FROM generate_series(1, 300) n""",
    ]
    for statement in statements:
        env.sql(DB, statement)
    env.sql(DB, "VACUUM ANALYZE")


def _ready() -> bool:
    try:
        rows = env.sql(DB, "SELECT count(*) FROM events")
    except Exception:  # noqa: BLE001 - no database, or no tables yet
        return False
    return rows[0][0] >= EVENTS


def build(rebuild: bool) -> int:
    """The filled database (kept between runs); returns the ``now`` its rows were made for."""
    from store import Store

    if rebuild or not _ready():
        env.create_database(DB)
        store = Store.connect(env.sqlalchemy_url(DB), pool_size=1)
        store.migrate()
        store.dispose()
        now = int(time.time())
        started = time.perf_counter()
        _populate(now)
        env.sql(DB, f"COMMENT ON DATABASE {DB} IS '{now}'")
        print(f"filled {DB} in {time.perf_counter() - started:,.0f} s")
    return int(env.sql(DB, f"SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                           f"WHERE datname = '{DB}'")[0][0])


# -- timing ---------------------------------------------------------------------------------------

def timed(name: str, reps: int, call: Callable[[], Any]) -> None:
    call()  # warm: connections, caches, prepared statements
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    print(f"  {name:<44} median {statistics.median(samples):7.1f} ms   worst {max(samples):7.1f} ms")


def store_reads(store: Any) -> dict[str, Callable[[], Any]]:
    first = store.console.timeline(HEAVY)
    return {
        "store.console.fleet()": lambda: store.console.fleet(),
        f"store.console.timeline({HEAVY!r})": lambda: store.console.timeline(HEAVY),
        f"store.console.timeline({HEAVY!r}, before=page 2)": lambda: store.console.timeline(HEAVY, before=first.older),
        f"store.console.timeline({QUIET!r})": lambda: store.console.timeline(QUIET),
        "store.console.timeline('u012345')": lambda: store.console.timeline("u012345"),
        "store.console.search('4411')": lambda: store.console.search("4411"),
    }


# -- plans ----------------------------------------------------------------------------------------

BIG = {"events", "runs", "outbox", "inboxes", "effects", "approvals", "timers", "spend"}


def plans(store: Any, reads: dict[str, Callable[[], Any]]) -> None:
    """Each read's statements under EXPLAIN ANALYZE, with the read's own parameters: the
    indexes they used, any sequential scan of a large table, and the slowest ones."""
    from sqlalchemy import event

    scans = 0
    for name, call in reads.items():
        seen: list[tuple[str, Any]] = []

        def note(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
            if statement.lstrip().upper().startswith("SELECT"):
                seen.append((statement, parameters))

        event.listen(store.engine, "before_cursor_execute", note)
        try:
            call()
        finally:
            event.remove(store.engine, "before_cursor_execute", note)
        rows = []
        with store.engine.connect() as conn:
            for statement, parameters in seen:
                plan = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters).scalar()[0]
                nodes = list(_nodes(plan["Plan"]))
                seq = sorted({n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan"} & BIG)
                rows.append((plan["Execution Time"], {n["Index Name"] for n in nodes if "Index Name" in n}, seq,
                             " ".join(statement.split())))
        scans += sum(len(seq) for _, _, seq, _ in rows)
        used = sorted(set().union(*(u for _, u, _, _ in rows)))
        print(f"  {name}: {len(rows)} statements, {sum(r[0] for r in rows):.1f} ms in the database; "
              f"sequential scans of a large table: {sum(len(r[2]) for r in rows)}")
        print(f"    indexes: {', '.join(used)}")
        for ms, index, seq, text in sorted(rows, key=lambda r: -r[0])[:3]:
            print(f"    {ms:7.2f} ms  {', '.join(sorted(index)) or '-'}{'  SEQ SCAN ' + ','.join(seq) if seq else ''}"
                  f"\n               {text[:150]}")
    print(f"  sequential scans of a large table in all: {scans}")


def _nodes(node: dict[str, Any]) -> Any:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


# -- over HTTP ------------------------------------------------------------------------------------

def http_reads(reps: int) -> None:
    import httpx

    from wakeful.web.console.access import hash_password

    port = _free_port()
    home = Path(os.environ.get("TMPDIR", "/tmp")) / "wakeful-bench-console"
    home.mkdir(exist_ok=True)
    process_env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEFUL_")}
    process_env.update({"WAKEFUL_DATABASE_URL": env.sqlalchemy_url(DB), "WAKEFUL_HOME": str(home),
                        "WAKEFUL_WEB_PORT": str(port),
                        "WAKEFUL_CONSOLE_USERS": f"bench:{hash_password(PASSWORD)}",
                        "PYTHONPATH": str(env.ROOT)})
    with open(home / "web.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "wakeful.web"], env=process_env, cwd=home, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_up(base, proc)
        with httpx.Client(base_url=base, auth=("bench", PASSWORD), timeout=30) as http:
            first = http.get("/console/inbox", params={"i": HEAVY})
            older = first.text.split('rel="next" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
            pages = {"GET /console": "/console", f"GET /console/inbox?i={HEAVY}": f"/console/inbox?i={HEAVY}",
                     f"GET {HEAVY}'s page 2": older, f"GET /console/inbox?i={QUIET}": f"/console/inbox?i={QUIET}",
                     "GET /console/inbox?i=u012345": "/console/inbox?i=u012345",
                     "GET /console/search?q=4411": "/console/search?q=4411"}
            for name, path in pages.items():
                timed(name, reps, lambda path=path: _ok(http.get(path)))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _ok(response: Any) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:200]}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(base: str, proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            httpx.get(base + "/healthz", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("the web edge did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="fill the database again")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions of each read (default 10)")
    parser.add_argument("--no-http", action="store_true", help="skip the web edge")
    args = parser.parse_args(argv)
    from store import Store

    made_at = build(args.rebuild)
    counts = env.sql(DB, "SELECT (SELECT count(*) FROM inboxes), (SELECT count(*) FROM events), "
                         "(SELECT count(*) FROM runs), (SELECT count(*) FROM outbox)")[0]
    print(f"{DB}: {counts[0]:,} inboxes, {counts[1]:,} events, {counts[2]:,} runs, {counts[3]:,} messages "
          f"(made {(time.time() - made_at) / 3600:.1f} h ago)")
    store = Store.connect(env.sqlalchemy_url(DB), pool_size=2)
    try:
        reads = store_reads(store)
        print("store reads (warm):")
        for name, call in reads.items():
            timed(name, args.reps, call)
        if not args.no_http:
            print("over HTTP, python -m wakeful.web (warm):")
            http_reads(args.reps)
        print("plans (EXPLAIN ANALYZE of every statement each store read ran; the slowest three shown):")
        plans(store, reads)
    finally:
        store.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
