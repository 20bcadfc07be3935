"""Start Flower only with authentication: ``wakeful flower`` (the Procfile's ``flower``).

Flower is open by default, and its API can call any task, revoke, terminate and restart
pools. This launcher refuses to start without ``WAKEFUL_FLOWER_BASIC_AUTH``
("user:password", comma-separated for several), refuses the unauthenticated-API switch, and
binds to loopback unless ``WAKEFUL_FLOWER_ADDRESS`` says otherwise. The credentials reach
Flower through its environment (``FLOWER_BASIC_AUTH``), never the command line, so they do
not show in ``ps``. Note that Flower keeps ``/metrics`` and ``/healthcheck`` open even with
auth: keep it on a private network.
"""

from __future__ import annotations

import os
import sys

from wakeful.settings import RuntimeSettings, for_process


class FlowerRefused(SystemExit):
    pass


def flower_command(s: RuntimeSettings, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment to exec, or FlowerRefused with the reason."""
    pairs = [p.strip() for p in s.flower_basic_auth.split(",") if p.strip()]
    if not pairs:
        raise FlowerRefused("wakeful flower: refusing to start Flower without authentication; "
                            "set WAKEFUL_FLOWER_BASIC_AUTH=user:password")
    for pair in pairs:
        user, sep, password = pair.partition(":")
        if not sep or not user or len(password) < 8:
            raise FlowerRefused("wakeful flower: WAKEFUL_FLOWER_BASIC_AUTH must be user:password "
                                "with a password of at least 8 characters")
    if env.get("FLOWER_UNAUTHENTICATED_API", "").strip().lower() not in ("", "0", "false", "no"):
        raise FlowerRefused("wakeful flower: refusing FLOWER_UNAUTHENTICATED_API: it opens the "
                            "API that can run and revoke tasks")
    if s.embedded_broker:
        print("wakeful flower: the embedded broker has no task events; Flower will show no "
              "workers. Use `wakeful status` (the store) instead.", file=sys.stderr)
    child_env = dict(env)
    child_env["FLOWER_BASIC_AUTH"] = ",".join(pairs)
    # Flower 2.2 hides args and results by default: show them, so each run_inbox row reads
    # as its inbox and its summary (from the task-succeeded event; results stay ignored).
    child_env.setdefault("FLOWER_TASKS_COLUMNS",
                         "name,args,result,state,received,runtime,worker,kwargs,uuid")
    command = [sys.executable, "-m", "celery", "-A", "tasks", "flower",
               f"--address={s.flower_address}", f"--port={s.flower_port}"]
    return command, child_env


def main() -> None:
    command, env = flower_command(for_process(RuntimeSettings, "wakeful flower"), dict(os.environ))
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main()
