"""Shared by the operator tests: the known content's ids, and JSON output parsed back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from typer.testing import Result


@dataclass
class Content:
    now: int
    poison_id: int
    done_ids: list[int]
    bob_event_id: int


def parsed(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
