"""Start, watch and stop real worker and beat processes (``wakeful demo`` and the tests).

Each process gets its own log file and its own process group, so stopping one never
touches anything else, and a SIGKILL of a worker (its main process and its pool children)
is exactly what a machine dying looks like to the rest of the system.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tasks.celeryconfig import CONTROL_QUEUE, DEFAULT_QUEUE, OUTBOX_QUEUE, RUNS_QUEUE

RUN_QUEUES = (RUNS_QUEUE,)
# The Procfile's run worker: a dense one (docs/runtime.md, "A dense run worker"). Agent runs
# wait seconds on a model and cost milliseconds of CPU, so one process carries hundreds of
# them in threads; an agent that burns CPU runs on prefork instead (-P prefork -c CORES).
RUN_POOL, RUN_CONCURRENCY = "threads", 200
CONTROL_QUEUES = (DEFAULT_QUEUE, CONTROL_QUEUE, OUTBOX_QUEUE)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    ready_marker: str = " ready."  # what its log says once it works: a worker's line by default

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@dataclass
class Processes:
    """A set of wakeful processes sharing one environment."""

    env: Mapping[str, str]
    logdir: Path
    cwd: Path | None = None
    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, args: list[str], extra_env: Mapping[str, str] | None = None,
              ready_marker: str = " ready.") -> Proc:
        self.logdir.mkdir(parents=True, exist_ok=True)
        log = self.logdir / f"{name}.log"
        out = open(log, "ab")
        popen = subprocess.Popen(args, env={**self.env, **(extra_env or {})}, cwd=self.cwd, stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        out.close()
        proc = Proc(name, popen, log, ready_marker)
        self.procs.append(proc)
        return proc

    def worker(self, name: str, queues: tuple[str, ...], concurrency: int = 1, pool: str = "prefork") -> Proc:
        return self.start(name, [
            sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "INFO",
            "-n", f"{name}@%h", "-Q", ",".join(queues), "-c", str(concurrency), "-P", pool,
            "--without-mingle", "--without-gossip"])

    def beat(self, name: str = "beat") -> Proc:
        return self.start(name, [sys.executable, "-m", "celery", "-A", "tasks", "beat",
                                 "-l", "INFO"], ready_marker="Sending due task")

    def wait_ready(self, *procs: Proc, timeout: float = 60.0) -> None:
        """Until each worker logged "ready." (beat: its first tick was sent)."""
        deadline = time.monotonic() + timeout
        for proc in procs:
            while proc.ready_marker not in proc.text():
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n"
                                       + proc.text()[-3000:])
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{proc.name} not ready after {timeout}s:\n"
                                       + proc.text()[-3000:])
                time.sleep(0.05)

    def kill(self, proc: Proc, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group: the main process and its pool children."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            proc.popen.wait(timeout=10)

    def terminate(self, proc: Proc) -> None:
        """SIGTERM to the main process only: a Celery worker then stops its pool children
        itself. A SIGTERM to the whole group kills the children under it, and its warm
        shutdown then outlasts any grace (docs/performance.md, "Stopping processes")."""
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def stop(self, proc: Proc, grace: float = 10.0) -> None:
        if proc.alive():
            self.terminate(proc)
            try:
                proc.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill(proc, signal.SIGKILL)
        # children of a killed main process may linger: end the group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop_all(self, grace: float = 10.0) -> None:
        for proc in reversed(self.procs):
            if proc.alive():
                self.terminate(proc)
        deadline = time.monotonic() + grace
        for proc in reversed(self.procs):
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            self.stop(proc, grace=0.1)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], object], timeout: float, what: str,
             interval: float = 0.05) -> object:
    """Poll until ``condition()`` is truthy; its value, or TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def holder_pid(holder: str | None) -> int | None:
    """The process id inside a lease holder name (host:pid:task)."""
    if not holder:
        return None
    parts = holder.split(":")
    try:
        return int(parts[-2])
    except (IndexError, ValueError):
        return None


def pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
