"""One fault scenario's wakeful: real worker, control and beat processes on PostgreSQL and Redis.

Shared by the CI scenarios (``tests/faults/``) and the soak (``python -m bench.soak``); it
needs no pytest. Every run worker logs its claims at the ``after_claim`` fault point
(``WAKEFUL_FAULTS=after_claim:log``) so the checker can compare attempts with claims, and
where a dense worker ran each agent call (``agent_call``: inline or apart); a
worker started with a fault (``faults="before_finish_commit:block"``) announces the point in
the same log before it blocks, and the scenario kills or pauses it there.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store import Store

from wakeful.cli.processes import CONTROL_QUEUES, RUN_QUEUES, Proc, Processes, wait_for

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # for bench.soak, which imports this without pytest
    sys.path.insert(0, str(HERE))
from checker import Inputs, check, read_jsonl  # noqa: E402

# Short real intervals. The lease is longer than the runtime tests' 2 s: a loaded 2-core
# machine can take over a second for one finish, and a lease lost to load (not to a fault)
# costs an attempt.
FAULT_ENV = {
    "WAKEFUL_LEASE_TTL": "5",
    "WAKEFUL_MAX_ATTEMPTS": "3",
    "WAKEFUL_BACKOFF_BASE": "1",
    "WAKEFUL_BACKOFF_MAX": "2",
    "WAKEFUL_OUTBOX_GAP": "3",
    "WAKEFUL_DISPATCH_TIMEOUT": "3",
    "WAKEFUL_SCAN_INTERVAL": "0.5",
    "WAKEFUL_SWEEP_INTERVAL": "1",
    "WAKEFUL_DISPATCH_INTERVAL": "0.5",
    "WAKEFUL_RUN_TIME_LIMIT": "60",
    "WAKEFUL_TASK_EVENTS": "0",
    "WAKEFUL_AGENT": "fault_agents:agent",
    "WAKEFUL_OUTBOX_CHANNEL": "fault_channels:at_least_once",
}

LIBFAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/faketime/libfaketime.so.1") if os.path.exists(p)), None)


@dataclass
class Stack:
    home: Path
    database_url: str
    broker_url: str
    overrides: dict[str, str] = field(default_factory=dict)
    inputs: Inputs = field(default_factory=Inputs)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.fault_log = self.home / "faults.jsonl"
        self.sent_log = self.home / "sent.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "FLOWER_"))}
        env.update(FAULT_ENV)
        env.update({
            "WAKEFUL_HOME": str(self.home),
            "WAKEFUL_DATABASE_URL": self.database_url,
            "WAKEFUL_BROKER_URL": self.broker_url,
            "WAKEFUL_FAULTS_LOG": str(self.fault_log),
            "WAKEFUL_FAULTS_SENT": str(self.sent_log),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
        })
        env.update(self.overrides)
        self.env = env
        self.procs = Processes(env=env, logdir=self.home / "logs")
        self.store = Store.connect(self.database_url)
        self._client: Any = None
        # What a production supervisor (compose's restart: unless-stopped) does: a process
        # that died without being killed by the scenario is started again, and counted.
        self._specs: dict[int, tuple[str, list[str], dict[str, str]]] = {}
        self._killed: set[int] = set()
        self.crashes: list[str] = []

    def setting(self, name: str) -> int:
        return int(float(self.env[f"WAKEFUL_{name.upper()}"]))

    # --- processes ---------------------------------------------------------------------
    def worker(self, name: str, queues: tuple[str, ...] = RUN_QUEUES, *, faults: str = "",
               concurrency: int = 1, extra_env: dict[str, str] | None = None,
               prefix: list[str] | None = None, pool: str = "prefork") -> Proc:
        """A worker; run workers always log their claims (after_claim:log)."""
        points = [faults] if faults else []
        if queues == RUN_QUEUES:
            points += [f"{p}:log" for p in ("after_claim", "agent_call") if p not in faults]
        env = {"WAKEFUL_FAULTS": ",".join(points), **(extra_env or {})}
        return self._spawn(name, (prefix or []) + [
            sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "INFO",
            "-n", f"{name}-{uuid.uuid4().hex[:6]}@%h", "-Q", ",".join(queues),
            "-c", str(concurrency), "-P", pool, "--without-mingle", "--without-gossip"], env)

    def _spawn(self, name: str, args: list[str], env: dict[str, str], ready_marker: str = " ready.") -> Proc:
        proc = self.procs.start(name, args, extra_env=env, ready_marker=ready_marker)
        self._specs[proc.pid] = (name, args, env, ready_marker)
        return proc

    def supervise(self) -> None:
        """Start again any process that died on its own (not killed by the scenario)."""
        for proc in list(self.procs.procs):
            if proc.pid in self._specs and proc.pid not in self._killed and not proc.alive():
                name, args, env, ready_marker = self._specs.pop(proc.pid)
                self.crashes.append(f"{name} exited {proc.popen.returncode}: {_last_error(proc)}")
                self._spawn(f"{name}-restarted", args, env, ready_marker)

    def control(self, name: str = "control", *, faults: str = "", concurrency: int = 2,
                extra_env: dict[str, str] | None = None) -> Proc:
        return self.worker(name, CONTROL_QUEUES, faults=faults, concurrency=concurrency,
                           extra_env=extra_env)

    def beat(self, name: str = "beat") -> Proc:
        return self._spawn(name, [sys.executable, "-m", "celery", "-A", "tasks", "beat",
                                  "-l", "INFO"], {}, ready_marker="Sending due task")

    def ready(self, *procs: Proc, timeout: float = 90.0) -> None:
        self.procs.wait_ready(*procs, timeout=timeout)

    def kill(self, proc: Proc, sig: int = signal.SIGKILL) -> None:
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self._killed.add(proc.pid)
        self.procs.kill(proc, sig)

    def close(self) -> None:
        self._killed.update(p.pid for p in self.procs.procs)
        for proc in self.procs.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self._client is not None:
            self._client.close()
        self.store.dispose()

    # --- the outside world -------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            from celery import Celery

            self._client = Celery("outside", broker=self.broker_url, backend=self.broker_url)
            self._client.conf.update(task_serializer="json", accept_content=["json"],
                                     result_accept_content=["json"],
                                     broker_connection_retry_on_startup=True)
        return self._client

    def ring(self, inbox: str) -> None:
        self.client.send_task("wakeful.run_inbox", args=[inbox], queue="wakeful.runs",
                              ignore_result=True)

    def feed(self, items: Iterable[tuple[str, str, str, dict[str, Any]]], ring: bool = True) -> int:
        """Store events (what the web edge does: store first, then ring); the inputs."""
        batch = list(items)
        stored = self.store.intake.ingest_many(batch)
        for (inbox, source, source_id, _), new in zip(batch, stored):
            self.inputs.add(inbox, source, source_id)
        if ring:
            for inbox in dict.fromkeys(i[0] for i in batch):
                try:
                    self.ring(inbox)
                except Exception:  # noqa: BLE001 - a lost ring is the sweep's job
                    pass
        return sum(stored)

    def send_ingest(self, inbox: str, source: str, source_id: str, payload: dict[str, Any]) -> Any:
        """Through the public task, waiting for its answer."""
        self.inputs.add(inbox, source, source_id)
        return self.client.send_task("wakeful.ingest", kwargs={
            "inbox": inbox, "source": source, "source_id": source_id, "payload": payload},
            ignore_result=False).get(timeout=60, interval=0.05)

    # --- waiting and counting ----------------------------------------------------------
    def announced(self, point: str, action: str = "block", after: int = 0) -> dict[str, Any] | None:
        for n, line in enumerate(read_jsonl(self.fault_log)):
            if n >= after and line.get("point") == point and line.get("action") == action:
                return line
        return None

    def log_length(self) -> int:
        return len(read_jsonl(self.fault_log))

    def wait(self, condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        def supervised() -> Any:
            self.supervise()
            return condition()

        try:
            return wait_for(supervised, timeout, what, interval=0.1)
        except TimeoutError:
            raise AssertionError(f"{what}: not within {timeout}s\n{self.logs()}") from None

    def wait_blocked(self, point: str, after: int = 0, timeout: float = 60.0) -> dict[str, Any]:
        return self.wait(lambda: self.announced(point, "block", after), f"a process blocked at {point}",
                         timeout)

    def settled(self, inboxes: Iterable[str] | None = None) -> bool:
        """Every event finished (done or dead), and no outbox row claimed but unmarked."""
        with self.store.engine.connect() as conn:
            from sqlalchemy import func, select

            from store.tables import events, outbox

            q = select(func.count()).where(events.c.status.not_in(("done", "dead")))
            o = select(func.count()).where(outbox.c.sent_at.is_(None), outbox.c.dispatch_key.is_not(None))
            if inboxes is not None:
                names = list(inboxes)
                q = q.where(events.c.inbox.in_(names))
                o = o.where(outbox.c.inbox.in_(names))
            return conn.execute(q).scalar() == 0 and conn.execute(o).scalar() == 0

    def outbox_drained(self) -> bool:
        from sqlalchemy import func, select

        from store.tables import outbox

        with self.store.engine.connect() as conn:
            return conn.execute(select(func.count()).where(outbox.c.sent_at.is_(None))).scalar() == 0

    def counts(self, *, delivery: str = "at-least-once", gap: bool = True,
               inboxes: set[str] | None = None) -> dict[str, int]:
        return check(self.store, inputs=self.inputs, max_attempts=self.setting("max_attempts"),
                     fault_log=read_jsonl(self.fault_log), sent=read_jsonl(self.sent_log),
                     delivery=delivery, outbox_gap=self.setting("outbox_gap") if gap else None,
                     inboxes=inboxes)

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {p.name} (pid {p.pid}, alive={p.alive()}) ---\n{p.text()[-tail:]}"
                         for p in self.procs.procs)


def _last_error(proc: Proc) -> str:
    text = proc.text().splitlines()
    lines = [line for line in text if "CRITICAL" in line] or [line for line in text if "Error" in line]
    return lines[0][-300:] if lines else "no error logged"


def faketime_prefix(offset: str) -> tuple[list[str], dict[str, str]]:
    """Run a process with its clock shifted (``offset`` like ``+10m``): libfaketime when it is
    installed, else a ``sitecustomize`` that shifts ``time.time`` in Python."""
    if LIBFAKETIME:
        # (FAKETIME_DONT_FAKE_MONOTONIC=1 makes time.sleep fail with EINVAL in 0.9.10.)
        return [], {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset, "FAKETIME_NO_CACHE": "1"}
    seconds = {"m": 60, "s": 1, "h": 3600}[offset[-1]] * int(offset[:-1])
    return [], {"WAKEFUL_TEST_TIME_SHIFT": str(seconds),
                "PYTHONPATH": os.pathsep.join([str(HERE / "timeshift"), str(HERE),
                                               os.environ.get("PYTHONPATH", "")])}


# --- services --------------------------------------------------------------------------
class PrivateRedis:
    """A redis-server of our own on a free loopback port (flushed and restarted at will)."""

    def __init__(self, workdir: Path) -> None:
        from wakeful.cli.processes import free_port

        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed")
        log = open(self.workdir / "redis.log", "ab")
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_for(self.ping, 15, "the private redis-server")

    def ping(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except Exception:  # noqa: BLE001
            return False

    def flush(self) -> None:
        import redis

        redis.Redis(port=self.port, socket_timeout=5).flushall()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()
