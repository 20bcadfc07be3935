"""Helpers shared by the runtime tests that do not need a whole cluster."""

from __future__ import annotations

import os
from pathlib import Path


def base_env(tmp_path: Path) -> dict[str, str]:
    """The test process's environment without any WAKEFUL_ or FLOWER_ setting, home in tmp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "FLOWER_"))}
    env["WAKEFUL_HOME"] = str(tmp_path / "home")
    return env


def processes_with_home(home: Path) -> list[int]:
    """Processes whose environment has WAKEFUL_HOME=home: what a test started and must stop."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"WAKEFUL_HOME={home}".encode() in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
