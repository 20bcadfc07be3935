"""A real PgBouncer in transaction pooling mode in front of the test PostgreSQL.

Debian's ``pgbouncer`` package (1.18 on Debian 12: it keeps no prepared statements across
transactions), started on a free loopback port with a configuration of the test's own. As
root it runs as the ``postgres`` user (PgBouncer refuses to run as root).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from databases import PG_ADMIN_URL, service_missing
from sqlalchemy.engine import make_url

POOL_SIZE = 10  # server connections per (database, user): what 64 clients share


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(workdir: Path, port: int) -> Path:
    admin = make_url(PG_ADMIN_URL)
    user = admin.username or "postgres"
    (workdir / "users.txt").write_text(f'"{user}" "{admin.password or ""}"\n')
    ini = workdir / "pgbouncer.ini"
    ini.write_text(f"""[databases]
* = host={admin.host or '127.0.0.1'} port={admin.port or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir / 'users.txt'}
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
admin_users = {user}
logfile = {workdir / 'pgbouncer.log'}
""")
    return ini


def pgbouncer_binary() -> str | None:
    """The pgbouncer program, or None where it is not installed."""
    return shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)


@contextmanager
def running_pgbouncer() -> Iterator[int]:
    """PgBouncer's port, for as long as the block runs."""
    binary = pgbouncer_binary()
    if binary is None:
        service_missing("pgbouncer", "no pgbouncer binary (apt-get install pgbouncer)")
    workdir = Path(tempfile.mkdtemp(prefix="wakeful-pgbouncer-"))
    os.chmod(workdir, 0o755)
    port = _free_port()
    ini = _config(workdir, port)
    command = [binary, str(ini)]
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres")  # for its log file
        command = ["runuser", "-u", "postgres", "--", *command]
    output = open(workdir / "output.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise RuntimeError(f"pgbouncer did not start: {(workdir / 'output.log').read_text()}")
                time.sleep(0.05)
        yield port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        output.close()
        shutil.rmtree(workdir, ignore_errors=True)


def through(url: str, port: int) -> str:
    """``url`` (a test database) reached through PgBouncer on ``port``."""
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


def server_connections(port: int, database: str) -> int:
    """Server connections PgBouncer holds for ``database`` (its admin console's SHOW POOLS)."""
    import psycopg

    admin = make_url(PG_ADMIN_URL)
    with psycopg.connect(host="127.0.0.1", port=port, dbname="pgbouncer", user=admin.username or "postgres",
                         autocommit=True, prepare_threshold=None) as conn:
        cur = conn.execute("SHOW POOLS")
        names = [d.name for d in cur.description]
        total = 0
        for row in cur.fetchall():
            pool = dict(zip(names, row))
            if pool["database"] == database:
                total += sum(int(pool[k]) for k in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"))
        return total
