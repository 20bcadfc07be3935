"""``celery -A tasks flower`` refuses to start without authentication whatever the shape of
its arguments: the check reads the options Flower itself parsed, not argv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

REFUSED = "refusing to start Flower without authentication"
SHAPES = [
    (["-A", "tasks", "flower"], {}, REFUSED),
    (["--app=tasks", "flower"], {}, REFUSED),
    (["--app", "tasks", "flower", "--basic-auth="], {}, REFUSED),
    (["-A", "tasks", "flower", "--basic_auth=:"], {}, REFUSED),
    (["-A", "tasks", "flower", "--auth=admin@example.com"], {}, REFUSED),  # no auth provider
    (["-A", "tasks", "flower"], {"FLOWER_BASIC_AUTH": ""}, REFUSED),
    (["-A", "tasks", "flower", "--basic-auth=admin:long-enough-pw"],
     {"FLOWER_UNAUTHENTICATED_API": "yes"}, "refusing FLOWER_UNAUTHENTICATED_API"),
]


def test_flower_refuses_every_shape_of_an_open_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "FLOWER_"))}
    env["WAKEFUL_HOME"] = str(tmp_path / "home")
    procs = [subprocess.Popen([sys.executable, "-m", "celery", *args, "--port=0"], env={**env, **extra},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for args, extra, _ in SHAPES]
    for proc, (args, extra, expected) in zip(procs, SHAPES):
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode != 0 and expected in out, (args, extra, out[-2000:])
