"""Helpers shared by the runtime tests that do not need a whole cluster."""

from __future__ import annotations

import os
from pathlib import Path


def base_env(tmp_path: Path) -> dict[str, str]:
    """The test process's environment without any WAKEFUL_ or FLOWER_ setting, home in tmp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "FLOWER_"))}
    env["WAKEFUL_HOME"] = str(tmp_path / "home")
    return env
