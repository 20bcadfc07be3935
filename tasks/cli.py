"""The ``wakeful`` command.

Imports stay inside the commands: ``wakeful demo`` must point the settings at its own
directory before anything reads them, and ``wakeful --help`` should not load Celery.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

cli = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="wakeful: a durable inbox, a fenced lease, timers, approvals and a "
                       "paced outbox for an always-on agent, on Celery.")
db_cli = typer.Typer(no_args_is_help=True, help="The store's database.")
cli.add_typer(db_cli, name="db")


def _store():
    from tasks.runtime import get_store

    return get_store()


@cli.command()
def demo(
    directory: Optional[Path] = typer.Option(
        None, "--dir", help="Where the demo keeps its files (default: a fresh temp directory)."),
    keep: bool = typer.Option(False, help="Keep the demo's directory (logs, SQLite files)."),
) -> None:
    """Play the article's story through real worker and beat processes, embedded, then stop."""
    from tasks.demo import run_demo

    raise typer.Exit(run_demo(directory, keep))


@cli.command()
def init() -> None:
    """Create or upgrade the store's tables; on the embedded broker, its tables and queues."""
    _init()
    typer.echo("wakeful: store migrated" + (", embedded broker ready" if _embedded() else ""))


def _embedded() -> bool:
    from tasks.settings import settings

    return settings.embedded_broker


def _init() -> None:
    from tasks.settings import settings

    settings.home.mkdir(parents=True, exist_ok=True)
    _store().migrate()
    if settings.embedded_broker:
        import tasks
        from tasks import embedded
        from tasks.celeryconfig import QUEUES

        embedded.init(tasks.app, QUEUES)


@db_cli.command("upgrade")
def db_upgrade() -> None:
    """Alembic upgrade to head."""
    _store().migrate()
    typer.echo("wakeful: store at the latest schema")


@cli.command()
def up(
    processes: list[str] = typer.Argument(None, help="Process types to start (default: all "
                                          "that can run here)."),
    procfile: Optional[Path] = typer.Option(None, help="Default: ./Procfile, else the one "
                                            "next to this package."),
) -> None:
    """Run the Procfile through honcho (development; use a real supervisor in production)."""
    from tasks.settings import settings

    path = procfile or _find_procfile()
    names = list(processes or [])
    if not names:
        names = _procfile_types(path)
        if not settings.flower_basic_auth and "flower" in names:
            typer.echo("wakeful up: skipping flower (set WAKEFUL_FLOWER_BASIC_AUTH to run it)",
                       err=True)
            names.remove("flower")
        if "web" in names and not _web_available():
            names.remove("web")
    _init()
    honcho = shutil.which("honcho") or str(Path(sys.executable).with_name("honcho"))
    os.execv(honcho, [honcho, "-f", str(path), "-d", str(Path.cwd()), "start", *names])


def _find_procfile() -> Path:
    for candidate in (Path.cwd() / "Procfile", Path(__file__).resolve().parent.parent / "Procfile"):
        if candidate.exists():
            return candidate
    raise typer.BadParameter("no Procfile here; pass --procfile")


def _procfile_types(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and ":" in line:
            names.append(line.split(":", 1)[0].strip())
    return names


def _web_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("web") is not None


@cli.command()
def ingest(
    inbox: str,
    source: str,
    source_id: str,
    payload: str = typer.Argument("{}", help="The event's JSON object."),
) -> None:
    """Store an event (once per inbox, source and source_id) and ring the inbox's doorbell."""
    from store import InvalidEvent
    from tasks.doorbell import ring

    try:
        body = json.loads(payload)
        stored = _store().ingest(inbox, source, source_id, body)
    except (ValueError, InvalidEvent) as exc:
        typer.echo(f"rejected: {exc}", err=True)
        raise typer.Exit(2)
    if stored:
        ring(inbox)
    typer.echo("stored" if stored else "duplicate (already stored)")


@cli.command()
def answer(inbox: str, request_id: str, reply: str = typer.Argument(..., help="yes or no")) -> None:
    """Answer an approval; prints the outcome that stands (yes, no, expired or unknown)."""
    from tasks.doorbell import ring

    try:
        outcome = _store().answer_approval(inbox, request_id, reply)
    except ValueError as exc:
        typer.echo(f"rejected: {exc}", err=True)
        raise typer.Exit(2)
    if outcome != "unknown":
        ring(inbox)
    typer.echo(outcome)
    if outcome == "unknown":
        raise typer.Exit(1)


@cli.command()
def status(inbox: Optional[str] = typer.Argument(None)) -> None:
    """One inbox's lease, events and outbox; without one, vital signs and inboxes to watch.

    Without an inbox: pending, running and dead events, the oldest pending age, held
    messages, overdue timers and counters; the inboxes with dead events or the oldest
    waiting work; the latest rejected input."""
    store = _store()
    if inbox:
        typer.echo(json.dumps(asdict(store.status(inbox)), indent=2))
        return
    typer.echo(json.dumps({"metrics": store.metrics(),
                           "attention": [asdict(s) for s in store.attention(limit=20)],
                           "rejected": [asdict(r) for r in store.rejections(limit=20)]},
                          indent=2, default=str))


@cli.command()
def dead(inbox: Optional[str] = typer.Argument(None)) -> None:
    """Events parked dead (too many attempts)."""
    for event in _store().dead(inbox):
        typer.echo(json.dumps(asdict(event), default=str))


@cli.command()
def incidents(since: int = typer.Option(86400, help="Seconds back.")) -> None:
    """Events parked dead and approvals expired in the last SINCE seconds (the daily summary)."""
    import time

    found = _store().incidents(int(time.time()) - since)
    typer.echo(json.dumps({k: [asdict(x) if hasattr(x, "__dataclass_fields__") else x
                               for x in v] for k, v in found.items()}, indent=2, default=str))


@cli.command()
def requeue(event_id: int) -> None:
    """A dead event back to pending (attempts reset), and its doorbell."""
    from tasks.doorbell import ring

    event = _store().requeue(event_id)
    if event is None:
        typer.echo(f"no dead event {event_id}", err=True)
        raise typer.Exit(1)
    ring(event.inbox)
    typer.echo(f"requeued event {event_id} in inbox {event.inbox!r}")


@cli.command()
def purge(older_than: Optional[int] = typer.Option(None, help="Seconds (default "
                                                   "WAKEFUL_RETENTION).")) -> None:
    """Retention: delete old finished rows now."""
    from tasks.settings import settings

    counts = _store().purge(older_than if older_than is not None else settings.retention)
    typer.echo(json.dumps(counts))


@cli.command()
def flower() -> None:
    """Start Flower with basic auth (refuses to start open)."""
    from tasks.flower import main as flower_main

    flower_main()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
