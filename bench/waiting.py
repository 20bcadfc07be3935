"""The ``agents`` section: agents that wait, as users run them (issue 22, item 5).

N inboxes x 1 event, each sent by a plain ``send_task("wakeful.ingest", ...)`` as another
service would, and an agent that waits L seconds before it answers, in these forms:

- ``sleep``: ``bench.waiting:sleeper``, ``time.sleep(L)`` then one message, on wakeful's run
  worker with the pool and concurrency asked for (``--agents-pool``, ``--agents-concurrency``);
- ``claude``: the built-in claude agent, the real ``anthropic`` SDK against the scripted
  Messages API (wakeful/agent/scripted.py, its own process) answering L seconds after each request;
- ``claude+proxy``: the same through ``wakeful proxy`` (its own process): the worker holds a
  grant per run, the proxy holds the key;
- with ``--agents-processes K``, each run worker (and the Celery peer) is K processes
  sharing the concurrency, its figures summed;
- ``before``: the Procfile's worker shape (prefork, 2 processes) with the sleeping agent, at a
  small N: the figure the issue starts from;
- ``async-sleep``: ``bench.waiting:async_sleeper``, the sleeping agent written ``async def``
  (``await asyncio.sleep(L)``), on the same worker shape as ``sleep``: the process's one event
  loop runs it (tasks/event_loop.py) while a pool thread waits for it.

Peers in the same run, on the same machine at the same moment:

- ``celery``: raw Celery (bench/peer.py, the same Celery settings) with the **same pool and
  concurrency**, a task that sleeps L (and a prefork x2 one next to ``before``);
- ``asyncio``: one plain asyncio loop making the same HTTP calls, N at once, to the same
  scripted server with the SDK's ``AsyncAnthropic`` (the limit: no broker, no database);
- ``asyncio+proxy``: that loop through the proxy, each call with its own run's grant (leases
  taken and grants minted through the store beforehand): the proxy alone at N calls;
- ``dbos`` (issue 56, item 3): the waiting agent as a durable DBOS workflow, an async step that
  awaits L, on a queue partitioned by inbox, enqueued from this process, one DBOS worker
  process on its own database (bench/dbos_peer.py);
- ``procrastinate``: an async procrastinate job awaiting L with the inbox as its ``lock``,
  deferred from this process, one worker process with the run worker's concurrency, on its
  own database (bench/procrastinate_peer.py). For both, the figures come from the peer's own
  records (its tables), the latency from the enqueue to the run's recorded end.

What is measured, for each form (docs/performance.md, "Agents that wait"):

- runs/s: runs done / (last reply seen - first ingest sent);
- runs in flight (peak): for the sleeping agent, the most agents asleep at once (each reply
  carries its agent's start and end); for the claude forms, the most requests the scripted
  server held at once (counted by the server); for the Celery peer, the most tasks asleep at
  once (each task records its start and end); also the most inbox leases held at once
  (sampled from the database every 0.2 s);
- latency: from the ingest call to the agent's reply seen in the outbox (the bench polls the
  outbox every 50 ms; the row's ``created`` is in whole seconds), p50 and p99; the peer's from
  send to the task's end; the limit's from the call to its answer;
- peak RSS of the worker: VmRSS of its main process plus its pool children, summed, sampled
  every 0.2 s from /proc; per run in flight = that peak / the peak runs in flight;
- database connections: the most rows in ``pg_stat_activity`` for the bench's database
  with the worker's ``application_name`` (every process the section starts sets its own
  through ``PGAPPNAME``), sampled every 0.2 s;
- error lines: lines matching ``ERROR``, ``Traceback``, ``CRITICAL`` or ``QueuePool limit``
  written during the form to every log of every process the section started.

Everything runs in its own PostgreSQL database (``wakeful_bench_agents_<pid>``) and a Redis
database number reserved as tests/databases.py reserves them, so nothing else on the
machine is touched. A form that is not done ``settle`` seconds past its ideal end is cut:
it reports what was done by then (today's code under the threads pool is cut; the figure
says so), and its worker is replaced before the next form.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.env import ROOT

SLEEPER = "bench.waiting:sleeper"
ASYNC_SLEEPER = "bench.waiting:async_sleeper"
MODEL_KEY = "sk-bench-not-a-real-key-0000"
ERROR_LINE = re.compile(rb"\bERROR\b|Traceback|CRITICAL|QueuePool limit")


def sleeper(run: Any) -> Any:
    """The sleeping agent: waits the events' ``wait`` seconds (a model call's time), then says
    when it started and ended (the bench reads both from the outbox)."""
    from store import Outcome

    started = time.time()
    wait = max((float((e.payload or {}).get("wait", 0)) for e in run.events), default=0.0)
    time.sleep(wait)
    return Outcome(messages=[json.dumps({"start": started, "end": time.time()})])


async def async_sleeper(run: Any) -> Any:
    """The same agent written ``async def``: it awaits the wait (tasks/event_loop.py runs it
    on the worker process's one event loop), as an agent on an async SDK awaits its model."""
    import asyncio

    from store import Outcome

    started = time.time()
    wait = max((float((e.payload or {}).get("wait", 0)) for e in run.events), default=0.0)
    await asyncio.sleep(wait)
    return Outcome(messages=[json.dumps({"start": started, "end": time.time()})])


# ---------------------------------------------------------------------------------------
# sizes and parameters


@dataclass
class AgentSizes:
    waits: tuple[float, ...]       # L, seconds
    inboxes: dict[float, int]      # N for each L
    before_inboxes: int            # N for the Procfile's prefork worker (2 runs at a time)
    settle: float                  # seconds past the ideal end before a form is cut

    def but(self, waits: list[float] | None, inboxes: int | None) -> "AgentSizes":
        """These sizes with the waits and the number of inboxes asked for on the command line."""
        waits_ = tuple(waits) if waits else self.waits
        n = {w: inboxes or self.inboxes.get(w, max(self.inboxes.values())) for w in waits_}
        return AgentSizes(waits_, n, min(self.before_inboxes, inboxes or self.before_inboxes), self.settle)

    @classmethod
    def quick(cls) -> "AgentSizes":
        # 400 inboxes: a burst of N at L = 2 s cannot exceed N / 2 runs/s, so N = 200 could
        # never show the 100 runs/s target. settle > the store's 30 s pool timeout, so a
        # pool that is too small shows its errors before the form is cut.
        return cls(waits=(2.0,), inboxes={2.0: 400}, before_inboxes=8, settle=35.0)

    @classmethod
    def full(cls) -> "AgentSizes":
        # 1,200 inboxes at L = 10 s so that >= 1,000 runs can be in flight at once.
        return cls(waits=(2.0, 10.0), inboxes={2.0: 1000, 10.0: 1200}, before_inboxes=20, settle=35.0)


FORMS = ("sleep", "async-sleep", "claude", "proxy", "before", "dbos", "procrastinate")
SLEEPING = ("sleep", "async-sleep")  # wakeful's sleeping forms, the Celery peer's
DURABLE = ("dbos", "procrastinate")  # the durable peers (issue 56, item 3)
DEFAULT_POOL, DEFAULT_CONCURRENCY = "threads", 1200


# ---------------------------------------------------------------------------------------
# measuring


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def tree_rss_kb(pid: int) -> int:
    """VmRSS of a process and all its descendants (a prefork worker's children)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    break
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return total


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process tree so far (children reaped included)."""
    total = 0
    for p in tree_pids(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def tree_pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def pg_sockets(pid: int, pg_port: int) -> int:
    """Established TCP connections from a process tree to PostgreSQL's port, from /proc
    (the store names every connection ``application_name=wakeful``, so pg_stat_activity
    cannot tell one process from another)."""
    inodes: set[str] = set()
    for p in tree_pids(pid):
        try:
            for fd in os.scandir(f"/proc/{p}/fd"):
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    if not inodes:
        return 0
    port = f"{pg_port:04X}"
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "01" and parts[2].endswith(":" + port) and parts[9] in inodes:
                n += 1
    return n


class Sampler(threading.Thread):
    """Every 0.2 s: RSS of the watched process trees and their connections to PostgreSQL,
    all connections to the bench database (pg_stat_activity), and leases held on the form's
    inboxes."""

    def __init__(self, db: str, pids: dict[str, int], inbox_prefix: str | None) -> None:
        super().__init__(daemon=True)
        self.db, self.pids, self.prefix = db, pids, inbox_prefix
        self.rss_kb: dict[str, int] = {name: 0 for name in pids}
        self.connections: dict[str, int] = {name: 0 for name in pids}
        self.db_total = 0
        self.cpu_s = {name: tree_cpu_s(pid) for name, pid in pids.items()}  # at the start
        self.leases = 0
        self._halt = threading.Event()

    def run(self) -> None:
        import psycopg

        from bench import env

        with psycopg.connect(env.pg_conninfo(self.db) + " application_name=bench-sampler",
                             autocommit=True) as conn:
            while not self._halt.is_set():
                for name, pid in self.pids.items():
                    self.rss_kb[name] = max(self.rss_kb[name], tree_rss_kb(pid))
                    self.connections[name] = max(self.connections[name], pg_sockets(pid, env.PG_PORT))
                total = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                     "AND pid <> pg_backend_pid()", (self.db,)).fetchone()[0]
                self.db_total = max(self.db_total, total)
                if self.prefix is not None:
                    held = conn.execute("SELECT count(*) FROM inboxes WHERE holder IS NOT NULL "
                                        "AND inbox LIKE %s", (self.prefix + "%",)).fetchone()[0]
                    self.leases = max(self.leases, held)
                self._halt.wait(0.2)

    def stop(self) -> "Sampler":
        self._halt.set()
        self.join(10)
        self.cpu_s = {name: tree_cpu_s(pid) - self.cpu_s[name] for name, pid in self.pids.items()}
        return self


# ---------------------------------------------------------------------------------------
# the rig: database, broker, processes


@dataclass
class Workers:
    """One form's worker as K processes sharing its concurrency (``--agents-processes``), to
    measure what a second interpreter on the box buys (docs/performance.md, "3 December,
    afternoon": little for the claude agent, a loss for the sleeping one). Its figures are the
    processes' sums: RSS the sum of each one's peak, connections and CPU summed."""

    members: list[Any]  # env.Worker, all of one pool

    @property
    def pool(self) -> str:
        return self.members[0].pool

    @property
    def concurrency(self) -> int:
        """All the processes' together."""
        return sum(w.concurrency for w in self.members)

    @property
    def pids(self) -> dict[str, int]:
        return {w.name: w.popen.pid for w in self.members}

    def rss_now_mb(self) -> float:
        """The processes' resident memory now (each with its pool's children), summed."""
        return sum(map(tree_rss_kb, self.pids.values())) / 1024

    def total(self, per_process: dict[str, Any]) -> Any:
        """A Sampler's figure (keyed by process name) summed over these processes."""
        return sum(per_process[name] for name in self.pids)

    def stop(self, timeout: float = 20) -> None:
        for w in self.members:
            w.stop(timeout=timeout)


@dataclass
class Rig:
    ctx: Any
    db: str
    broker: str
    home: Path
    pool: str
    concurrency: int
    processes: int = 1  # each run worker (and the peer) as this many processes
    sender: Any = None
    model_port: int = 0
    model: subprocess.Popen | None = None
    procs: dict[str, Any] = field(default_factory=dict)  # name -> env.Worker or Popen
    logs: dict[str, Path] = field(default_factory=dict)
    config: Path | None = None
    proxy_url: str = ""

    @property
    def database_url(self) -> str:
        from bench import env

        return env.sqlalchemy_url(self.db)

    def env(self, app_name: str, **extra: str) -> dict[str, str]:
        from bench import env

        return env.base_env(self.home, WAKEFUL_DATABASE_URL=self.database_url, WAKEFUL_BROKER_URL=self.broker,
                            BENCH_REDIS_URL=self.broker, PGAPPNAME=app_name, **extra)

    def log_offsets(self) -> dict[str, int]:
        return {name: (p.stat().st_size if p.exists() else 0) for name, p in self.logs.items()}

    def error_lines(self, since: dict[str, int]) -> dict[str, int]:
        out = {}
        for name, path in self.logs.items():
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(since.get(name, 0))
                n = sum(1 for line in f if ERROR_LINE.search(line))
            if n:
                out[name] = n
        return out

    # -- workers

    def worker(self, name: str, app: str, queues: tuple[str, ...], pool: str, concurrency: int,
               processes: int = 1, **extra: str) -> "Workers":
        """``processes`` workers sharing ``concurrency``. Each dense one gets
        ``WAKEFUL_DATABASE_POOL_SIZE`` = its share of the one-process pool (20), so the
        processes together hold what one would: 20 connections at most."""
        from bench import env

        if processes > 1 and app == "tasks" and pool == "threads":
            extra.setdefault("WAKEFUL_DATABASE_POOL_SIZE", str(max(1, 20 // processes)))
        members = []
        for k in range(processes):
            member = name if k == 0 else f"{name}-{k + 1}"
            w = env.Worker(f"agents-{member}", app, queues, self.env(f"bench-{name}", **extra), self.home,
                           concurrency=max(1, concurrency // processes), pool=pool)
            w.start()
            self.logs[member] = w.log
            members.append(w)
        group = self.procs[name] = Workers(members)
        for w in members:
            w.wait_ready(self.sender.control, timeout=120)  # a ping on this section's broker
        return group

    def stop(self, name: str, timeout: float = 20) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        if hasattr(proc, "stop"):
            proc.stop(timeout=timeout)
        else:
            _stop_popen(proc)

    # -- the scripted model, its own process, restarted (counters at 0) for each form

    def start_model(self, delay: float) -> None:
        self.stop_model()
        log = self.home / "agents-model.log"
        self.logs["model"] = log
        with open(log, "ab") as out:
            self.model = subprocess.Popen([sys.executable, "-m", "wakeful.agent.scripted", str(self.model_port), str(delay)],
                                          env=self.env("bench-model"), cwd=ROOT, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        _wait_http(f"{self.model_url}/_scripted/stats", self.model, log)

    def stop_model(self) -> None:
        if self.model is not None:
            _stop_popen(self.model)
            self.model = None

    @property
    def model_url(self) -> str:
        return f"http://127.0.0.1:{self.model_port}"

    def model_stats(self) -> dict[str, Any]:
        import httpx

        return httpx.get(f"{self.model_url}/_scripted/stats", timeout=5).json()

    # -- the egress proxy

    def start_proxy(self) -> subprocess.Popen:
        log = self.home / "agents-proxy.log"
        self.logs["proxy"] = log
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "wakeful.proxy"],
                                    env=self.env("bench-proxy", WAKEFUL_AGENT_CONFIG=str(self.config),
                                                 WAKEFUL_PROXY_URL=self.proxy_url, BENCH_MODEL_KEY=MODEL_KEY),
                                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs["proxy"] = proc
        _wait_http(f"{self.proxy_url}/healthz", proc, log)
        return proc


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited, see {log}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url}: not answering after {timeout}s, see {log}")


def _stop_popen(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


def write_config(path: Path, model_url: str, proxied: bool) -> Path:
    lines = ["[agent]", 'model = "claude-scripted"', 'system = "You answer."', 'trusted_sources = ["chat"]',
             # the SDK's own timeout per call: well above L (the bench's longest wait is 10 s)
             "timeout = 120"]
    if proxied:
        lines += ["", "[routes.anthropic]", f'upstream = "{model_url}"', 'secret_env = "BENCH_MODEL_KEY"',
                  'header = "x-api-key"', 'allow = ["POST /v1/messages"]']
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------------------
# the forms


@dataclass
class Figures:
    form: str
    wait: float
    n: int
    pool: str
    concurrency: int
    processes: int = 1
    done: int = 0
    seconds: float = 0.0
    cut: bool = False
    in_flight: int = 0
    leases: int | None = None
    p50: float | None = None
    p99: float | None = None
    rss_mb: float | None = None
    idle_rss_mb: float | None = None
    connections: int | None = None
    errors: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)  # the logs' sizes when the form began

    @property
    def runs_per_s(self) -> float | None:
        return self.done / self.seconds if self.seconds > 0 else None

    @property
    def rss_per_run_mb(self) -> float | None:
        return self.rss_mb / self.in_flight if self.rss_mb and self.in_flight else None


def _ideal(wait: float, n: int, concurrency: int) -> float:
    """The least a burst of n waits of L can take on `concurrency` slots."""
    return -(-n // concurrency) * wait


def _prefix(form: str, wait: float) -> str:
    return f"{form}-{wait:g}s-"


def wakeful_form(rig: Rig, form: str, worker_name: str, wait: float, n: int, *, model: bool,
                 watch_proxy: bool = False) -> Figures:
    import psycopg

    from bench import env

    worker = rig.procs[worker_name]
    fig = Figures(form, wait, n, worker.pool, worker.concurrency, len(worker.members))
    prefix = _prefix(form, wait)
    offsets = fig.offsets = rig.log_offsets()
    fig.idle_rss_mb = worker.rss_now_mb()
    pids = dict(worker.pids)
    if watch_proxy:
        pids["proxy"] = rig.procs["proxy"].pid
    sampler = Sampler(rig.db, pids, prefix)
    sampler.start()
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    spans: list[tuple[float, float]] = []
    with psycopg.connect(env.pg_conninfo(rig.db) + " application_name=bench-poller", autocommit=True) as conn:
        last = conn.execute("SELECT coalesce(max(id), 0) FROM outbox").fetchone()[0]
        for i in range(n):
            inbox = f"{prefix}{i}"
            sent[inbox] = time.time()
            rig.sender.send_task("wakeful.ingest", kwargs={"inbox": inbox, "source": "chat", "source_id": "1",
                                                           "payload": {"text": "hello", "wait": wait}})
        deadline = time.time() + _ideal(wait, n, worker.concurrency) + rig.ctx.agent_sizes.settle
        while len(seen) < n and time.time() < deadline:
            # By inbox, not "id > the last seen": finishes commit out of id order, and a row
            # committed after a higher id was read would never be seen. Joined to the unseen
            # names rather than filtered by `inbox = ANY(...)`, which searches the array row by
            # row: the poll's own PostgreSQL CPU is taken from the form it measures
            # (docs/performance.md, "4 December, evening").
            unseen = [i for i in sent if i not in seen]
            rows = conn.execute("SELECT o.id, o.inbox, o.body FROM outbox o "
                                "JOIN unnest(%s::text[]) AS u(inbox) ON o.inbox = u.inbox WHERE o.id > %s",
                                (unseen, last)).fetchall()
            now = time.time()
            for _row_id, inbox, body in rows:
                if inbox not in seen:
                    seen[inbox] = now
                    if not model:
                        try:
                            b = json.loads(body)
                            spans.append((b["start"], b["end"]))
                        except (ValueError, KeyError, TypeError):
                            pass
            time.sleep(0.05)
        if len(seen) < n:
            fig.extra["unseen"] = _unseen(conn, [i for i in sent if i not in seen])
    sampler.stop()
    fig.cut = len(seen) < n
    fig.done = len(seen)
    first = min(sent.values())
    fig.seconds = (max(seen.values()) if seen else time.time()) - first
    lat = [seen[i] - sent[i] for i in seen]
    fig.p50, fig.p99 = percentile(lat, 50), percentile(lat, 99)
    if model:
        stats = rig.model_stats()
        fig.in_flight = stats["peak_in_flight"]
        fig.extra["model_calls"] = stats["answered"]
    else:
        fig.in_flight = peak_overlap(spans)
    fig.leases = sampler.leases
    fig.rss_mb = worker.total(sampler.rss_kb) / 1024  # the sum of each one's peak
    fig.connections = worker.total(sampler.connections)
    fig.extra["db_connections_all_processes"] = sampler.db_total
    fig.extra["worker_cpu_ms_per_run"] = round(1000 * worker.total(sampler.cpu_s) / max(1, fig.done), 1)
    if watch_proxy:
        fig.extra["proxy_cpu_ms_per_run"] = round(1000 * sampler.cpu_s["proxy"] / max(1, fig.done), 1)
        fig.extra["proxy_rss_mb"] = round(sampler.rss_kb["proxy"] / 1024, 1)
        fig.extra["proxy_db_connections"] = sampler.connections["proxy"]
    fig.errors = rig.error_lines(offsets)
    return fig


def _unseen(conn: Any, inboxes: list[str]) -> dict[str, int]:
    """Where the inboxes whose reply never came stand, for a cut form: their events' status
    and whether the inbox is leased (live, lapsed or never)."""
    rows = conn.execute(
        "SELECT e.status || ' attempts=' || e.attempts || CASE WHEN e.not_before > extract(epoch FROM now()) "
        "THEN ' backing off' ELSE '' END || CASE WHEN i.inbox IS NULL THEN ', no inbox row' "
        "WHEN i.lease_until >= extract(epoch FROM now()) THEN ', leased' ELSE ', not leased' END, count(*) "
        "FROM events e LEFT JOIN inboxes i ON i.inbox = e.inbox WHERE e.inbox = ANY(%s) GROUP BY 1",
        (inboxes,)).fetchall()
    return {state: count for state, count in rows}


def peer_form(rig: Rig, worker_name: str, wait: float, n: int) -> Figures:
    from bench import env, peer

    worker = rig.procs[worker_name]
    fig = Figures("celery", wait, n, worker.pool, worker.concurrency, len(worker.members))
    r = env.redis_client_for(rig.broker)
    r.delete(peer.SPANS_KEY)
    offsets = rig.log_offsets()
    fig.idle_rss_mb = worker.rss_now_mb()
    sampler = Sampler(rig.db, dict(worker.pids), None)
    sampler.start()
    first = time.time()
    for _ in range(n):
        rig.sender.send_task("bench.wait", args=(wait, time.time()), queue=peer.QUEUE)
    deadline = time.time() + _ideal(wait, n, worker.concurrency) + rig.ctx.agent_sizes.settle
    while r.llen(peer.SPANS_KEY) < n and time.time() < deadline:
        time.sleep(0.05)
    sampler.stop()
    rows = [tuple(map(float, x.split())) for x in r.lrange(peer.SPANS_KEY, 0, -1)]
    fig.done, fig.cut = len(rows), len(rows) < n
    fig.seconds = (max(e for _, _, e in rows) if rows else time.time()) - first
    lat = [e - s for s, _, e in rows]
    fig.p50, fig.p99 = percentile(lat, 50), percentile(lat, 99)
    fig.in_flight = peak_overlap([(b, e) for _, b, e in rows])
    fig.rss_mb = worker.total(sampler.rss_kb) / 1024
    fig.extra["worker_cpu_ms_per_run"] = round(1000 * worker.total(sampler.cpu_s) / max(1, fig.done), 1)
    fig.errors = rig.error_lines(offsets)
    return fig


def durable_form(rig: Rig, form: str, peer: Any, wait: float, n: int) -> Figures:
    """A durable peer (bench/dbos_peer.py, bench/procrastinate_peer.py): N runs enqueued one
    by one from this process, each with its inbox as its key, then figures from the peer's
    own records: runs/s = finished / (the last one's end - the first enqueue), in flight = the
    most waits (the DBOS step, the procrastinate job) open at once, latency = enqueue -> end."""
    import psycopg

    from bench import env

    fig = Figures(form, wait, n, "asyncio", peer.concurrency)
    prefix = _prefix(form, wait)
    offsets = fig.offsets = rig.log_offsets()
    pid = peer.proc.pid
    fig.idle_rss_mb = tree_rss_kb(pid) / 1024
    sampler = Sampler(peer.db, {form: pid}, None)
    sampler.start()
    sent: dict[str, float] = {}
    first = time.time()
    for i in range(n):
        inbox = f"{prefix}{i}"
        sent[inbox] = time.time()
        peer.enqueue(inbox, wait)
    fig.extra["send_s"] = round(time.time() - first, 2)
    deadline = time.time() + _ideal(wait, n, peer.concurrency) + rig.ctx.agent_sizes.settle
    with psycopg.connect(env.pg_conninfo(peer.db) + " application_name=bench-poller", autocommit=True) as conn:
        while peer.finished(conn, prefix) < n and time.time() < deadline:
            time.sleep(0.1)
        records = peer.records(conn, prefix)
    sampler.stop()
    ended = {i: r["end"] for i, r in records.items() if r["ok"] and r["end"] is not None}
    fig.done, fig.cut = len(ended), sum(1 for r in records.values() if r["end"] is not None) < n
    fig.seconds = (max(ended.values()) if ended else time.time()) - first
    lat = [ended[i] - sent[i] for i in ended if i in sent]
    fig.p50, fig.p99 = percentile(lat, 50), percentile(lat, 99)
    fig.in_flight = peak_overlap([r["wait"] for r in records.values() if r["wait"]])
    fig.extra["runs_held_peak"] = peak_overlap([r["run"] for r in records.values() if r["run"]])
    failed: dict[str, int] = {}
    for r in records.values():
        if not r["ok"]:
            failed[r["status"]] = failed.get(r["status"], 0) + 1
    if failed:
        fig.extra["not_succeeded"] = failed
    fig.rss_mb = sampler.rss_kb[form] / 1024
    fig.connections = sampler.connections[form]
    fig.extra["db_connections_all_processes"] = sampler.db_total
    fig.extra["worker_cpu_ms_per_run"] = round(1000 * sampler.cpu_s[form] / max(1, fig.done), 1)
    fig.errors = rig.error_lines(offsets)
    return fig


def _warm_durable(peer: Any, form: str, n: int = 4) -> None:
    """A few runs that do not wait, so the worker's first fetch and connections are not in
    the figure (and the DBOS queue's worker thread has started)."""
    import psycopg

    from bench import env

    prefix = f"warm-{form}-"
    for i in range(n):
        peer.enqueue(f"{prefix}{i}", 0.0)
    deadline = time.time() + 60
    with psycopg.connect(env.pg_conninfo(peer.db), autocommit=True) as conn:
        while peer.finished(conn, prefix) < n:
            if time.time() > deadline:
                raise RuntimeError(f"{form}: the warm-up runs did not finish in 60 s (see {peer.log})")
            time.sleep(0.1)


def limit_form(rig: Rig, wait: float, n: int, grants: list[str] | None = None) -> Figures:
    """The plain asyncio loop, in its own process (python -m bench.waiting limit ...)."""
    form = "asyncio+proxy" if grants else "asyncio"
    fig = Figures(form, wait, n, "asyncio", n)
    offsets = rig.log_offsets()
    log = rig.home / "agents-limit.log"
    rig.logs["limit"] = log
    args = [sys.executable, "-m", "bench.waiting", "limit", rig.model_url, str(n)]
    if grants:
        gfile = rig.home / "grants.json"
        gfile.write_text(json.dumps(grants))
        args = [sys.executable, "-m", "bench.waiting", "limit", f"{rig.proxy_url}/anthropic", str(n), str(gfile)]
    proxy_cpu = tree_cpu_s(rig.procs["proxy"].pid) if grants else 0.0
    with open(log, "ab") as err:
        out = subprocess.run(args, env=rig.env("bench-limit"), cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                             timeout=wait + 300)
    result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    fig.done, fig.seconds = result["done"], result["seconds"]
    fig.cut = fig.done < n
    fig.p50, fig.p99 = result["p50"], result["p99"]
    fig.in_flight = rig.model_stats()["peak_in_flight"]
    fig.rss_mb = result["rss_kb"] / 1024
    fig.extra["client_peak_in_flight"] = result["peak"]
    fig.extra["client_cpu_ms_per_call"] = round(1000 * result["cpu_s"] / n, 2)
    if grants:
        fig.extra["proxy_cpu_ms_per_call"] = round(1000 * (tree_cpu_s(rig.procs["proxy"].pid) - proxy_cpu) / n, 2)
    if result["errors"]:
        fig.extra["call_errors"] = result["errors"]
    fig.errors = rig.error_lines(offsets)
    return fig


def mint_grants(rig: Rig, wait: float, n: int) -> list[str]:
    """For asyncio+proxy: n inboxes, each with a live lease and a run's grant for the model's
    route, as the runtime mints them (the proxy checks each call's grant in the store)."""
    from store import Store

    from concurrent.futures import ThreadPoolExecutor

    store = Store.connect(rig.database_url, pool_size=4)
    prefix = _prefix("grant", wait)

    def mint(i: int) -> str:
        start = store.runs.start(f"{prefix}{i}", "bench-limit")
        return store.grants.mint(f"{prefix}{i}", "bench-limit", start.generation, ["anthropic"], 900)

    try:
        store.intake.ingest_many([(f"{prefix}{i}", "chat", "1", {"text": "hello"}) for i in range(n)])
        with ThreadPoolExecutor(4) as pool:  # not timed: only the calls are
            return list(pool.map(mint, range(n)))
    finally:
        store.dispose()


async def _limit(url: str, n: int, grants: list[str] | None) -> dict[str, Any]:
    import anthropic
    import httpx2

    # No cap of its own: the limit is what the loop, the network stack and the server give.
    http = anthropic.DefaultAsyncHttpxClient(limits=httpx2.Limits(max_connections=None,
                                                                  max_keepalive_connections=None))
    import asyncio

    clients = [anthropic.AsyncAnthropic(api_key=g, base_url=url, http_client=http, max_retries=0, timeout=120)
               for g in (grants or ["bench-key"])]
    lat: list[float] = []
    errors: dict[str, int] = {}
    state = {"now": 0, "peak": 0}

    async def one(i: int) -> None:
        client = clients[i % len(clients)]
        started = time.monotonic()
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        try:
            await client.messages.create(model="claude-scripted", max_tokens=1024, system="You answer.",
                                         messages=[{"role": "user", "content": "hello"}])
            lat.append(time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
        finally:
            state["now"] -= 1

    t0, cpu0 = time.monotonic(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    seconds, cpu = time.monotonic() - t0, time.process_time() - cpu0
    await http.aclose()
    return {"done": len(lat), "seconds": seconds, "p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "peak": state["peak"], "errors": errors, "rss_kb": tree_rss_kb(os.getpid()), "cpu_s": cpu}


# ---------------------------------------------------------------------------------------
# the section


def run(ctx: Any) -> None:
    from celery import Celery

    from bench import env, peer
    from tasks.celeryconfig import CONTROL_QUEUE, DEFAULT_QUEUE, OUTBOX_QUEUE, RUNS_QUEUE

    sizes: AgentSizes = ctx.agent_sizes
    pool, concurrency, processes = ctx.agents_pool, ctx.agents_concurrency, ctx.agents_processes
    forms = ctx.agents_forms or FORMS
    db = env.create_database(f"wakeful_bench_agents_{os.getpid()}")
    results: list[Figures] = []
    try:
        from store import Store

        store = Store.connect(env.sqlalchemy_url(db), pool_size=1)
        store.migrate()
        store.dispose()
        with env.reserved_redis_db() as broker:
            sender = Celery("bench_agents_sender", broker=broker)
            sender.conf.broker_connection_retry_on_startup = True
            rig = Rig(ctx, db, broker, ctx.home / "agents", pool, concurrency, processes, sender=sender,
                      model_port=_free_port(), proxy_url=f"http://127.0.0.1:{_free_port()}")
            rig.home.mkdir(parents=True, exist_ok=True)
            try:
                _run_forms(ctx, rig, sizes, forms, results, (DEFAULT_QUEUE, CONTROL_QUEUE, OUTBOX_QUEUE),
                           (RUNS_QUEUE,), (peer.QUEUE,))
            finally:
                for name in list(rig.procs):
                    rig.stop(name)
                rig.stop_model()
    finally:
        env.drop_database(db)
        _record(ctx, results)


def _run_forms(ctx: Any, rig: Rig, sizes: AgentSizes, forms: tuple[str, ...], results: list[Figures],
               control_queues: tuple[str, ...], run_queues: tuple[str, ...], peer_queues: tuple[str, ...]) -> None:
    from bench import env

    say = ctx.progress
    say(f"agents: control worker (prefork x2), runs worker -P {rig.pool} -c {rig.concurrency}"
        f"{f' as {rig.processes} processes' if rig.processes > 1 else ''}; L = "
        f"{', '.join(f'{w:g} s' for w in sizes.waits)}; N = {sizes.inboxes}")
    rig.worker("control", "tasks", control_queues, "prefork", 2)

    def done(fig: Figures) -> None:
        results.append(fig)
        say("agents: " + _line(fig))
        env.extend_redis_reservation(rig.broker)

    def fresh_after_cut(fig: Figures, name: str, restart: Any) -> None:
        if fig.cut:  # leftovers must not run into the next form
            say(f"agents: {fig.form} at L={fig.wait:g}s cut at {fig.done}/{fig.n}: replacing its worker")
            rig.stop(name, timeout=3)  # its runs are abandoned: no warm shutdown
            fig.errors = rig.error_lines(fig.offsets)  # what its runs logged until the worker stopped
            _abandon(rig, _prefix(fig.form, fig.wait))
            restart()

    for form, agent in (("sleep", SLEEPER), ("async-sleep", ASYNC_SLEEPER)):
        if form not in forms:
            continue
        start = lambda agent=agent: rig.worker("runs", "tasks", run_queues, rig.pool, rig.concurrency, rig.processes, WAKEFUL_AGENT=agent)  # noqa: E731
        start()
        _warm(rig, form)
        for wait in sizes.waits:
            fresh_after_cut(f := wakeful_form(rig, form, "runs", wait, sizes.inboxes[wait], model=False), "runs", start)
            done(f)
        rig.stop("runs")
    if any(form in forms for form in SLEEPING):
        rig.worker("peer", "bench.peer", peer_queues, rig.pool, rig.concurrency, rig.processes)
        for wait in sizes.waits:
            done(peer_form(rig, "peer", wait, sizes.inboxes[wait]))
        rig.stop("peer")
    for form in DURABLE:
        if form in forms:
            _durable_forms(rig, form, sizes, done, say)
    if any(form in forms for form in ("claude", "proxy", *SLEEPING, *DURABLE)):
        # The limit: every row's "vs asyncio" (the same N waits of L as HTTP calls, nothing around them).
        for wait in sizes.waits:
            rig.start_model(wait)
            done(limit_form(rig, wait, sizes.inboxes[wait]))
    if "claude" in forms:
        rig.config = write_config(rig.home / "agent.toml", rig.model_url, proxied=False)
        claude_env = {"WAKEFUL_AGENT": "claude", "WAKEFUL_AGENT_CONFIG": str(rig.config),
                      "ANTHROPIC_BASE_URL": rig.model_url, "ANTHROPIC_API_KEY": MODEL_KEY}
        start = lambda: rig.worker("claude", "tasks", run_queues, rig.pool, rig.concurrency, rig.processes, **claude_env)  # noqa: E731
        start()
        for wait in sizes.waits:
            rig.start_model(wait)
            fresh_after_cut(f := wakeful_form(rig, "claude", "claude", wait, sizes.inboxes[wait], model=True),
                            "claude", start)
            done(f)
        rig.stop("claude")
    if "proxy" in forms:
        rig.config = write_config(rig.home / "agent-proxy.toml", rig.model_url, proxied=True)
        proxy_env = {"WAKEFUL_AGENT": "claude", "WAKEFUL_AGENT_CONFIG": str(rig.config),
                     "WAKEFUL_PROXY_URL": rig.proxy_url, "ANTHROPIC_API_KEY": "",
                     "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/unused"}
        # The proxy is started afresh for each form: measured on 1 December, after a burst of
        # 1,200 calls it answered every later request 504 (see docs/performance.md), and one
        # form's overload must not decide the next one's figure.
        for wait in sizes.waits:
            rig.start_model(wait)
            rig.start_proxy()
            grants = mint_grants(rig, wait, sizes.inboxes[wait])
            done(limit_form(rig, wait, sizes.inboxes[wait], grants))
            rig.stop("proxy")
        start = lambda: rig.worker("claude-proxy", "tasks", run_queues, rig.pool, rig.concurrency, rig.processes, **proxy_env)  # noqa: E731
        rig.start_proxy()
        start()
        for wait in sizes.waits:
            rig.start_model(wait)
            if "proxy" not in rig.procs:
                rig.start_proxy()
            fresh_after_cut(f := wakeful_form(rig, "claude+proxy", "claude-proxy", wait, sizes.inboxes[wait],
                                              model=True, watch_proxy=True), "claude-proxy", start)
            done(f)
            rig.stop("proxy")
        rig.stop("claude-proxy")
        rig.stop("proxy")
    if "before" in forms:
        wait, n = sizes.waits[0], sizes.before_inboxes
        rig.worker("before", "tasks", run_queues, "prefork", 2, WAKEFUL_AGENT=SLEEPER)
        _warm(rig, "before")
        done(wakeful_form(rig, "before", "before", wait, n, model=False))
        rig.stop("before")
        rig.worker("peer-prefork", "bench.peer", peer_queues, "prefork", 2)
        f = peer_form(rig, "peer-prefork", wait, n)
        f.form = "celery-prefork"
        done(f)
        rig.stop("peer-prefork")


def _durable_forms(rig: Rig, form: str, sizes: AgentSizes, done: Any, say: Any) -> None:
    """The DBOS or procrastinate peer at every wait: its own database, one worker process
    with the wakeful worker's concurrency, replaced after a cut form."""
    try:
        if form == "dbos":
            from bench.dbos_peer import Peer

            peer = Peer(rig, rig.concurrency, getattr(rig.ctx, "agents_dbos_poll", None))
        else:
            from bench.procrastinate_peer import AgentsPeer as Peer  # type: ignore[assignment]

            peer = Peer(rig, rig.concurrency)
    except ImportError as exc:
        say(f"agents: {form} skipped: {exc} (pip install -e '.[bench]')")
        return
    try:
        peer.start()
        _warm_durable(peer, form)
        for wait in sizes.waits:
            fig = durable_form(rig, form, peer, wait, sizes.inboxes[wait])
            if fig.cut:
                say(f"agents: {form} at L={wait:g}s cut at {fig.done}/{fig.n}: replacing its worker")
                peer.stop()
                fig.errors = rig.error_lines(fig.offsets)
                peer.abandon(_prefix(form, wait))
                peer.start()
            done(fig)
    finally:
        peer.close()


def _warm(rig: Rig, form: str, n: int = 4) -> None:
    """A few runs that do not wait, so imports and first connections are not in the figure."""
    import psycopg

    from bench import env

    for i in range(n):
        rig.sender.send_task("wakeful.ingest", kwargs={"inbox": f"warm-{form}-{i}", "source": "chat",
                                                       "source_id": "1", "payload": {"text": "hi", "wait": 0}})
    deadline = time.time() + 60
    with psycopg.connect(env.pg_conninfo(rig.db), autocommit=True) as conn:
        while time.time() < deadline:
            if conn.execute("SELECT count(DISTINCT inbox) FROM outbox WHERE inbox LIKE %s",
                            (f"warm-{form}-%",)).fetchone()[0] >= n:
                return
            time.sleep(0.1)


def _abandon(rig: Rig, prefix: str) -> None:
    """After a cut form (its worker stopped): its events left pending are dead and its queued
    run tasks dropped, so the next form starts from an empty queue."""
    from bench import env
    from tasks.celeryconfig import RUNS_QUEUE

    env.sql(rig.db, "UPDATE events SET status = 'dead' WHERE inbox LIKE %s AND status <> 'done'", (prefix + "%",))
    env.sql(rig.db, "UPDATE inboxes SET holder = NULL, lease_until = 0 WHERE inbox LIKE %s", (prefix + "%",))
    r = env.redis_client_for(rig.broker)
    r.delete(RUNS_QUEUE)
    r.delete("unacked", "unacked_index")


# ---------------------------------------------------------------------------------------
# the report


def _f(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        s = f"{v:,.0f}"
    elif abs(v) >= 10:
        s = f"{v:.1f}"
    else:
        s = f"{v:.2f}"
    return s + unit


def _shape(f: Figures) -> str:
    """pool x concurrency, and the processes sharing it when more than one."""
    return f"{f.pool} x {f.concurrency}" + (f" ({f.processes} processes)" if f.processes > 1 else "")


def _line(f: Figures) -> str:
    return (f"{f.form} L={f.wait:g}s N={f.n} ({_shape(f)}): {f.done}/{f.n} in {f.seconds:.1f}s"
            f"{' CUT' if f.cut else ''}, {_f(f.runs_per_s)} runs/s, in flight {f.in_flight}"
            f"{'' if f.leases is None else f' (leases {f.leases})'}, p50 {_f(f.p50, ' s')} p99 {_f(f.p99, ' s')}, "
            f"RSS {_f(f.rss_mb, ' MB')} ({_f(f.rss_per_run_mb, ' MB')}/run), "
            f"db conns {f.connections if f.connections is not None else '-'}, errors {sum(f.errors.values())}"
            f"{' ' + json.dumps(f.errors) if f.errors else ''}{' ' + json.dumps(f.extra) if f.extra else ''}")


def _record(ctx: Any, results: list[Figures]) -> None:
    ctx.results.notes["agents"] = [dict({k: v for k, v in vars(f).items() if k != "offsets"},
                                        runs_per_s=f.runs_per_s, rss_per_run_mb=f.rss_per_run_mb) for f in results]
    for f in results:
        key = f"agents_{f.form.replace('+', '_').replace('-', '_')}_{f.wait:g}s"
        if f.runs_per_s is not None:
            ctx.results.add(key + "_runs_per_s", f.runs_per_s)


PEERS = ("celery", "celery-prefork", "asyncio", "asyncio+proxy", *DURABLE)


def table(notes: dict[str, Any]) -> list[str]:
    """The section's tables, targets and ratios, from ``notes["agents"]`` (bench/report.py)."""
    rows = notes.get("agents")
    if not rows:
        return []
    figs = [Figures(**{k: v for k, v in r.items() if k not in ("runs_per_s", "rss_per_run_mb")}) for r in rows]
    out = ["", "**Agents that wait** (N inboxes x 1 event, plain `send_task(\"wakeful.ingest\")`, the agent waits L)", "",
           "| form | L | pool x concurrency | done / N | runs/s | peak in flight (leases) | p50 | p99 | "
           "worker RSS peak | RSS / run in flight | worker DB conns | error lines | vs Celery | vs asyncio "
           "| vs DBOS | vs procrastinate |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(f.form, f.wait): f for f in figs}
    for f in figs:
        peer = by.get(("celery-prefork" if f.form == "before" else "celery", f.wait))
        limit = by.get(("asyncio", f.wait))
        vs_peer = _ratio(f, peer) if f.form not in PEERS else None
        vs_limit = _ratio(f, limit) if f.form != "asyncio" else None
        # wakeful's forms against each durable peer, and the two durable peers against each other
        vs = {d: _ratio(f, by.get((d, f.wait))) if f.form != d and not f.form.startswith("asyncio") else None
              for d in DURABLE}
        leases = f" ({f.leases})" if f.leases is not None else ""
        out.append(f"| {f.form} | {f.wait:g} s | {_shape(f)} | {f.done} / {f.n}{' (cut)' if f.cut else ''} "
                   f"| {_f(f.runs_per_s)} | {f.in_flight}{leases} | {_f(f.p50, ' s')} | {_f(f.p99, ' s')} "
                   f"| {_f(f.rss_mb, ' MB')} | {_f(f.rss_per_run_mb, ' MB')} "
                   f"| {'-' if f.connections is None else f.connections} | {sum(f.errors.values())} "
                   f"| {_f(vs_peer, 'x')} | {_f(vs_limit, 'x')} | {_f(vs['dbos'], 'x')} "
                   f"| {_f(vs['procrastinate'], 'x')} |")
    extras = [(f, f.extra, f.errors) for f in figs if f.extra or f.errors]
    if extras:
        out += [""] + [f"- {f.form} L={f.wait:g}s: " + ", ".join(
            [f"{k} {json.dumps(v)}" for k, v in x.items()] + ([f"error lines by log {json.dumps(e)}"] if e else []))
            for f, x, e in extras]
    pairs = [(a, b) for a, b in (("async-sleep", "sleep"), ("async-sleep", "dbos"), ("async-sleep", "procrastinate"),
                                 ("sleep", "dbos"), ("sleep", "procrastinate"), ("dbos", "procrastinate"))
             if any(f.form == a for f in figs) and any(f.form == b for f in figs)]
    if pairs:
        out += ["", "| ratio | L | runs/s | runs in flight |", "|---|---:|---:|---:|"]
        for a, b in pairs:
            for wait in sorted({f.wait for f in figs}):
                fa, fb = by.get((a, wait)), by.get((b, wait))
                if fa and fb:
                    out.append(f"| {a} / {b} | {wait:g} s | {_f(_ratio(fa, fb), 'x')} "
                               f"| {_f(fa.in_flight / fb.in_flight if fb.in_flight else None, 'x')} |")
    out += ["", "| target (issue 22) | met | measured |", "|---|---|---:|"]
    out += [f"| {name} | {'yes' if ok else ('no' if ok is False else '-')} | {got} |" for name, ok, got in targets(figs)]
    durable = durable_targets(figs)
    if durable:
        out += ["", "| target (issue 56) | met | measured |", "|---|---|---:|"]
        out += [f"| {name} | {'yes' if ok else ('no' if ok is False else '-')} | {got} |" for name, ok, got in durable]
    return out


def durable_targets(figs: list[Figures]) -> list[tuple[str, bool | None, str]]:
    """Issue 56's: the sleeping async agent >= 1.0x each durable peer in runs/s at L = 2 s and
    in runs in flight at L = 60 s (each ratio at the same L and N, from the same run)."""
    by = {(f.form, f.wait): f for f in figs}
    if not any(f.form == "async-sleep" for f in figs) or not any(f.form in DURABLE for f in figs):
        return []
    out: list[tuple[str, bool | None, str]] = []
    for d in DURABLE:
        if not any(f.form == d for f in figs):
            continue
        a, p = by.get(("async-sleep", 2.0)), by.get((d, 2.0))
        r = _ratio(a, p) if a and p else None
        out.append((f"async-sleep L=2s: >= 1.0x {d} in runs/s", None if r is None else r >= 1.0,
                    _f(r, "x") if r is not None else "not measured (--agents-waits 2)"))
        a, p = by.get(("async-sleep", 60.0)), by.get((d, 60.0))
        r = a.in_flight / p.in_flight if a and p and p.in_flight else None
        out.append((f"async-sleep L=60s: >= 1.0x {d} in runs in flight", None if r is None else r >= 1.0,
                    _f(r, "x") if r is not None else "not measured (--agents-waits 2 60)"))
    return out


def _ratio(f: Figures, peer: Figures | None) -> float | None:
    if peer is None or not f.runs_per_s or not peer.runs_per_s:
        return None
    return f.runs_per_s / peer.runs_per_s


def targets(figs: list[Figures]) -> list[tuple[str, bool | None, str]]:
    """Issue 22's targets, for each wakeful form on the dense worker (not ``before``)."""
    out: list[tuple[str, bool | None, str]] = []
    by = {(f.form, f.wait): f for f in figs}
    longest = max((f.wait for f in figs), default=0.0)
    for f in figs:
        if f.form not in ("sleep", "async-sleep", "claude", "claude+proxy"):
            continue
        tag = f"{f.form} L={f.wait:g}s"
        out.append((f"{tag}: no error line in any log", not f.errors and not f.cut,
                    f"{sum(f.errors.values())}{' (cut)' if f.cut else ''}"))
        out.append((f"{tag}: <= 2 MB worker RSS per run in flight",
                    None if f.rss_per_run_mb is None else f.rss_per_run_mb <= 2, _f(f.rss_per_run_mb, " MB")))
        if f.wait == 2:
            peer = by.get(("celery", 2.0))
            out.append((f"{tag}: >= 100 runs/s", None if f.runs_per_s is None else f.runs_per_s >= 100,
                        _f(f.runs_per_s)))
            r = _ratio(f, peer)
            out.append((f"{tag}: >= 0.5x the Celery peer", None if r is None else r >= 0.5, _f(r, "x")))
        if f.wait == longest and f.n >= 1000:  # the longest wait is where 1,000 can be in flight
            out.append((f"{tag}: >= 1,000 runs in flight", f.in_flight >= 1000, str(f.in_flight)))
            out.append((f"{tag}: <= 20 worker DB connections for >= 1,000 runs in flight",
                        None if f.connections is None else f.connections <= 20 and f.in_flight >= 1000,
                        f"{f.connections} for {f.in_flight} in flight"))
    if not any(f.n >= 1000 for f in figs):
        out.append((">= 1,000 runs in flight, <= 20 DB connections for them", None,
                    f"not measured: N = {max((f.n for f in figs), default=0)} (use the full run)"))
    return out


# ---------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """``python -m bench.waiting limit URL N [GRANTS.json]``: the asyncio limit, as JSON."""
    import asyncio

    if len(argv) >= 3 and argv[0] == "limit":
        grants = json.loads(Path(argv[3]).read_text()) if len(argv) > 3 else None
        print(json.dumps(asyncio.run(_limit(argv[1], int(argv[2]), grants))), flush=True)
        return 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
