"""``module:callable`` names, loaded: the agent (``WAKEFUL_AGENT``), a Python tool's
``call`` (wakeful/agent/tools.py), a channel (tasks/channels). The built-in agents' short names are
here too, so every place that reads ``WAKEFUL_AGENT`` resolves them one way."""

from __future__ import annotations

import os
import pkgutil
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["BUILTIN", "builtin", "import_callable", "importable_from"]

# Built-in agents chosen by a bare name (``WAKEFUL_AGENT=claude``).
BUILTIN = {"claude": "wakeful.agent.claude:agent", "demo": "wakeful.agent.demo:agent"}


def builtin(spec: str) -> str:
    """``WAKEFUL_AGENT`` as ``module:callable``: a built-in's name resolved, anything else as given."""
    return BUILTIN.get(spec, spec)


def importable_from(*directories: str | os.PathLike[str]) -> None:
    """Let ``module:callable`` name a module in these directories (the agent config's own,
    the working directory, as Celery's ``-A`` finds an app there) with no ``PYTHONPATH``.
    Appended to ``sys.path``: a local file never shadows an installed package."""
    for directory in directories:
        entry = os.path.abspath(directory)
        if entry not in sys.path:
            sys.path.append(entry)


def import_callable(spec: str) -> Callable[..., Any]:
    """``module:callable`` (a dotted attribute path after the colon), imported by the standard
    library's ``pkgutil.resolve_name``."""
    module_name, colon, attr = spec.partition(":")
    if not module_name or not colon or not attr:
        raise ValueError(f"{spec!r} must be module:callable")
    target = pkgutil.resolve_name(spec)
    if not callable(target):
        raise TypeError(f"{spec!r} is not callable")
    return target
