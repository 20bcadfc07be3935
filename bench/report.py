"""The table of medians and ratios, the targets of issue 5, and the JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.context import Results

# (key, label, unit) in the order of issue 5's table; extras after the issue's keys.
ROWS = [
    ("ingest_per_s", "wakeful.ingest by task call", "events/s"),
    ("celery_noop_per_s", "  peer: raw Celery no-op task", "tasks/s"),
    ("ingest_many_per_s", "store.intake.ingest_many (batches of 100, 2 clients)", "rows/s"),
    ("pgbench_insert_tps", "  peer: pgbench, same INSERT ... ON CONFLICT, 2 clients", "tx/s (1 row)"),
    ("pgbench_insert_batch_rows_per_s", "  peer: pgbench, same INSERT, 100 rows per statement", "rows/s"),
    ("wake_p50_ms", "ingest call -> agent called, p50, unloaded", "ms"),
    ("wake_p99_ms", "ingest call -> agent called, p99, unloaded", "ms"),
    ("wake_to_run_task_p50_ms", "  of which: ingest call -> run task started, p50", "ms"),
    ("wake_run_task_to_agent_p50_ms", "  of which: run task started -> agent called, p50", "ms"),
    ("celery_p50_ms", "  peer: Celery send -> task start, p50, unloaded", "ms"),
    ("celery_p99_ms", "  peer: Celery send -> task start, p99, unloaded", "ms"),
    ("web_p50_ms", "POST /hooks/github/{inbox} -> agent called, p50, unloaded", "ms"),
    ("web_p99_ms", "POST /hooks/github/{inbox} -> agent called, p99, unloaded", "ms"),
    ("celery_web_run_p50_ms", "  peer: Celery send -> task start, p50 (same section)", "ms"),
    ("celery_web_run_p99_ms", "  peer: Celery send -> task start, p99 (same section)", "ms"),
    ("wake_p50_ms_half_load", "ingest call -> agent called, p50, half load", "ms"),
    ("wake_p99_ms_half_load", "ingest call -> agent called, p99, half load", "ms"),
    ("celery_p50_ms_half_load", "  peer: send -> start, p50, half load", "ms"),
    ("celery_p99_ms_half_load", "  peer: send -> start, p99, half load", "ms"),
    ("events_per_s_1", "backlog drain, 1,000 inboxes, 1 event per wake", "events/s"),
    ("events_per_s_10", "backlog drain, 1,000 inboxes, 10 events per wake", "events/s"),
    ("procrastinate_per_s", "  peer: procrastinate, lock per key over 1,000 keys", "jobs/s"),
    ("drain_pgbouncer_per_s", "1 event per wake, through PgBouncer (transaction pooling)", "events/s"),
    ("drain_direct_per_s", "  the same drain, direct to PostgreSQL", "events/s"),
    ("pgbouncer_64_workers_per_s", "1 event per wake, 64 worker processes through PgBouncer", "events/s"),
    ("pgbouncer_64_workers_server_connections", "  most server connections PgBouncer held for them", ""),
    ("backlog_with_doorbells_per_s", "backlog of N inboxes x 1 event, every doorbell rung", "events/s"),
    ("backlog_without_doorbells_per_s", "  the same after a broker flush (one sweep tick rings 1,000)", "events/s"),
    ("hot_inbox_per_s", "10,000 events in one hot inbox (+100 others arriving)", "events/s"),
    ("hot_spread_per_s", "  the same 10,000 over 1,000 inboxes", "events/s"),
    ("hot_others_done_p50_s", "  others while the hot inbox drains: ingest -> done, p50", "s"),
    ("hot_others_done_p99_s", "  others while the hot inbox drains: ingest -> done, p99", "s"),
    ("commits_per_wake", "commits per wake (worker, SQLAlchemy events)", ""),
    ("pg_xact_commit_per_wake", "  cross-check: pg_stat_database xact_commit per wake", ""),
    ("statements_per_wake", "SQL statements per wake (excl. BEGIN/COMMIT)", ""),
    ("checkouts_per_wake", "pool checkouts per wake (each a pre-ping SELECT 1)", ""),
    ("redis_cmds_per_wake", "Redis commands per wake (ring included)", ""),
    ("scan_ms_due10k_of_10k", "run_scheduler: 10k due of 10k timers", "ms"),
    ("scan_ms_due10k_of_1m", "run_scheduler: 10k due of 1M timers", "ms"),
    ("worker_rss_mb", "peak RSS of a wakeful worker process", "MB"),
    ("celery_worker_rss_mb", "  peer: raw Celery worker process", "MB"),
    ("procrastinate_worker_rss_mb", "  peer: procrastinate worker process", "MB"),
]


def ratios(m: dict[str, float | None]) -> dict[str, float | None]:
    def div(a: str, b: str) -> float | None:
        return m[a] / m[b] if m.get(a) is not None and m.get(b) else None

    return {
        "ingest_ratio": div("ingest_per_s", "celery_noop_per_s"),
        "ingest_many_vs_ingest": div("ingest_many_per_s", "ingest_per_s"),
        "ingest_many_vs_pgbench": div("ingest_many_per_s", "pgbench_insert_tps"),
        "ingest_many_vs_pgbench_batch": div("ingest_many_per_s", "pgbench_insert_batch_rows_per_s"),
        "wake_p99_minus_celery_p99_ms": (m["wake_p99_ms"] - m["celery_p99_ms"])
        if m.get("wake_p99_ms") is not None and m.get("celery_p99_ms") is not None else None,
        "wake_p99_half_load_ratio": div("wake_p99_ms_half_load", "celery_p99_ms_half_load"),
        "events_1_vs_procrastinate": div("events_per_s_1", "procrastinate_per_s"),
        "events_10_vs_procrastinate": div("events_per_s_10", "procrastinate_per_s"),
        "scan_1m_vs_10k": div("scan_ms_due10k_of_1m", "scan_ms_due10k_of_10k"),
        "backlog_ratio": div("backlog_without_doorbells_per_s", "backlog_with_doorbells_per_s"),
        "hot_inbox_ratio": div("hot_inbox_per_s", "hot_spread_per_s"),
        "pgbouncer_drain_ratio": div("drain_pgbouncer_per_s", "drain_direct_per_s"),
        "worker_rss_vs_celery": div("worker_rss_mb", "celery_worker_rss_mb"),
    }


def targets(m: dict[str, Any], r: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    def check(value: float | None, ok) -> bool | None:
        return None if value is None else bool(ok(value))

    return [
        ("ingest_ratio >= 0.8", check(r["ingest_ratio"], lambda v: v >= 0.8), _f(r["ingest_ratio"])),
        ("ingest_many_per_s >= 5x ingest_per_s", check(r["ingest_many_vs_ingest"], lambda v: v >= 5), _f(r["ingest_many_vs_ingest"]) + "x"),
        ("wake_p99 <= celery_p99 + 5 ms (unloaded)", check(r["wake_p99_minus_celery_p99_ms"], lambda v: v <= 5), "+" + _f(r["wake_p99_minus_celery_p99_ms"]) + " ms"),
        ("wake_p99 <= 2x celery_p99 (half load)", check(_half_load_valid(m, r), lambda v: v <= 2), _f(r["wake_p99_half_load_ratio"]) + "x"),
        ("events_per_s_1 >= procrastinate_per_s", check(r["events_1_vs_procrastinate"], lambda v: v >= 1), _f(r["events_1_vs_procrastinate"]) + "x"),
        ("events_per_s_10 >= 5x procrastinate_per_s", check(r["events_10_vs_procrastinate"], lambda v: v >= 5), _f(r["events_10_vs_procrastinate"]) + "x"),
        ("commits_per_wake <= 3", check(m.get("commits_per_wake"), lambda v: v <= 3), _f(m.get("commits_per_wake"))),
        ("scan 1m within 1.5x of scan 10k", check(r["scan_1m_vs_10k"], lambda v: v <= 1.5), _f(r["scan_1m_vs_10k"]) + "x"),
        ("pgbouncer_drain_ratio >= 0.7", check(r["pgbouncer_drain_ratio"], lambda v: v >= 0.7), _f(r["pgbouncer_drain_ratio"])),
        ("64 workers on <= 10 server connections", check(m.get("pgbouncer_64_workers_server_connections"), lambda v: v <= 10), _f(m.get("pgbouncer_64_workers_server_connections"))),
        ("hot_inbox_ratio >= 0.5", check(r["hot_inbox_ratio"], lambda v: v >= 0.5), _f(r["hot_inbox_ratio"])),
        ("a flushed backlog drains at >= 0.8x the rung one", check(r["backlog_ratio"], lambda v: v >= 0.8), _f(r["backlog_ratio"]) + "x"),
    ]


def _half_load_valid(m: dict[str, Any], r: dict[str, Any]) -> float | None:
    """The half-load ratio, or None when the peer was not at half load but saturated (its p50
    under load above 10x its unloaded p50: the machine slowed down after its peak was taken)."""
    loaded, idle = m.get("celery_p50_ms_half_load"), m.get("celery_p50_ms")
    if loaded is None or idle is None or loaded > 10 * idle:
        return None
    return r["wake_p99_half_load_ratio"]


def _f(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def table(results: Results) -> tuple[str, dict[str, Any]]:
    m = {key: results.median(key) for key in results.samples}
    r = ratios(m)
    from bench.waiting import table as agents_table

    lines = agents_table(results.notes)  # the agents section first: what users will compare
    lines += ["", "| figure | key | median | runs |", "|---|---|---:|---|"]
    for key, label, unit in ROWS:
        if key not in results.samples:
            continue
        runs = ", ".join(_f(v) for v in results.samples[key])
        lines.append(f"| {label.strip()} | `{key}` | {_f(m[key])} {unit} | {runs} |")
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| `{k}` | {_f(v)} |" for k, v in r.items()]
    lines += ["", "| target (issue 5) | met | measured |", "|---|---|---:|"]
    lines += [f"| {name} | {'yes' if ok else ('no' if ok is False else '-')} | {got} |" for name, ok, got in targets(m, r)]
    lines += _cpu_table(results.notes)
    data: dict[str, Any] = {k: (round(v, 3) if v is not None else None) for k, v in m.items()}
    data.update({k: (round(v, 3) if v is not None else None) for k, v in r.items()})
    data["samples"] = {k: [round(x, 3) for x in v] for k, v in results.samples.items()}
    data["targets"] = {name: ok for name, ok, _ in targets(m, r)}
    data["notes"] = results.notes
    return "\n".join(lines), data


# (note key, what one item is), from bench/cpu.py: CPU per message, by kind of process.
CPU_NOTES = [
    ("cpu_ms_per_noop", "Celery no-op task"),
    ("cpu_ms_per_ingest", "wakeful.ingest task"),
    ("cpu_ms_per_event_1", "event, drain at 1 per wake"),
    ("cpu_ms_per_event_10", "event, drain at 10 per wake"),
    ("cpu_ms_per_procrastinate_job", "procrastinate job"),
]
CPU_KINDS = ("worker main", "pool", "postgres", "redis", "bench", "total")


def _cpu_table(notes: dict[str, Any]) -> list[str]:
    """Where each figure's CPU went, from its last run: the sum over the machine's cores
    is the floor of what one item costs, and the biggest column is the first to cut."""
    rows = [(label, notes[key]) for key, label in CPU_NOTES if notes.get(key)]
    if not rows:
        return []
    out = ["", "| CPU ms per item (last run) | " + " | ".join(CPU_KINDS) + " |",
           "|---|" + "---:|" * len(CPU_KINDS)]
    for label, cpu in rows:
        out.append(f"| {label} | " + " | ".join(_f(cpu.get(k)) for k in CPU_KINDS) + " |")
    return out


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
