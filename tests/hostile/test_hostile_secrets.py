"""No repr, log line or error message shows a password or token: the Procfile's processes
run on a password-protected Redis and a PostgreSQL URL with a password, with a webhook
channel whose URL carries userinfo and a token and whose receiver is down."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hostile_support import stack_env

from wakeful.cli.processes import Processes, free_port, wait_for
from store import Store
from tasks.channels.webhook import WebhookChannel, WebhookError
from wakeful.settings import RuntimeSettings

pytestmark = [pytest.mark.postgres, pytest.mark.processes]

PG_PASSWORD = "pg-pass-4f1c"
REDIS_PASSWORD = "redis-pass-9d2e"
HOOK_PASSWORD = "hook-pass-77aa"
HOOK_TOKEN = "tok-s3cret-0b5f"
SECRETS = (PG_PASSWORD, REDIS_PASSWORD, HOOK_PASSWORD, HOOK_TOKEN)


def with_password(url: str, password: str) -> str:
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{password}@{host}"


@pytest.fixture
def private_redis(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A redis-server whose password comes in on stdin (as docker-compose.yml does it)."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "-", "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            start_new_session=True)
    proc.stdin.write(f'requirepass "{REDIS_PASSWORD}"\n'.encode())  # type: ignore[union-attr]
    proc.stdin.close()  # type: ignore[union-attr]
    yield f"redis://:{REDIS_PASSWORD}@127.0.0.1:{port}/0"
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_no_process_logs_a_password_or_token(pg_url: str, private_redis: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    closed = free_port()  # nothing listens here: every send fails
    hook_url = f"http://wakeful:{HOOK_PASSWORD}@127.0.0.1:{closed}/hook?token={HOOK_TOKEN}&x=1"
    env = stack_env(home, with_password(pg_url, PG_PASSWORD), private_redis,
                    WAKEFUL_OUTBOX_CHANNEL=hook_url, WAKEFUL_WEBHOOK_ATTEMPTS="2",
                    WAKEFUL_DISPATCH_INTERVAL="1")
    procs = Processes(env=env, logdir=home / "logs")
    from wakeful.cli.processes import CONTROL_QUEUES, RUN_QUEUES

    started = [procs.worker("worker", RUN_QUEUES), procs.worker("control", CONTROL_QUEUES, concurrency=2),
               procs.beat()]
    store = Store.connect(pg_url)
    try:
        procs.wait_ready(*started, timeout=90)
        inbox = f"s-{uuid.uuid4().hex[:6]}"
        sent = subprocess.run([sys.executable, "-m", "wakeful.cli.main", "ingest", inbox, "chat", "1",
                               '{"text": "hello", "urgent": true}'], env=env, capture_output=True,
                              text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        control = started[1]
        wait_for(lambda: "did not take message" in control.text(), 60, "a failed webhook send logged")
        status = subprocess.run([sys.executable, "-m", "wakeful.cli.main", "status"], env=env,
                                capture_output=True, text=True, timeout=60)
        text = "\n".join(p.text() for p in procs.procs) + status.stdout + status.stderr
        assert "127.0.0.1" in text  # the logs do name where things are
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} shown:\n{text[-5000:]}"
        assert "***@127.0.0.1" in control.text()  # the channel's URL, redacted
    finally:
        for proc in procs.procs:
            procs.kill(proc, signal.SIGKILL)
        store.dispose()
    settings = RuntimeSettings.from_env(env)
    assert not any(secret in repr(settings) for secret in SECRETS)


def test_the_webhook_channel_never_shows_its_credentials() -> None:
    url = f"https://bot:{HOOK_PASSWORD}@127.0.0.1:{free_port()}/in?token={HOOK_TOKEN}"
    channel = WebhookChannel(url, timeout=2, attempts=1)
    from store import OutgoingMessage

    message = OutgoingMessage(inbox="a", key="k-1", body="hi", urgent=False, message_ids=(1,))
    with pytest.raises(WebhookError) as raised:
        channel(message)
    shown = str(raised.value) + repr(channel)
    assert HOOK_PASSWORD not in shown and HOOK_TOKEN not in shown
    assert "https://***@127.0.0.1:" in shown and "token=%2A%2A%2A" in shown
    channel.close()
