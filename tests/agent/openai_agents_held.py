"""The OpenAI Agents SDK example's agent with a model that holds its first tool-calling reply
of the whole cluster until the test lets it go (tests/agent/test_openai_agents_loop.py):
the worker is stopped meanwhile, so another takes the inbox over.

``OPENAI_AGENTS_TEST_HOLD`` names a directory: the first such reply writes ``held`` there
(its first call's id, as JSON) and waits for ``release``; every later reply, in any process,
goes at once.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from agents import Agent

from wakeful.examples.openai_agents_loop import StandInModel
from wakeful.integrations.openai_agents import agent_for


class HeldModel(StandInModel):
    async def get_response(self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any) -> Any:
        response = await super().get_response(system_instructions, input, *args, **kwargs)
        calls = [o for o in response.output if getattr(o, "type", None) == "function_call"]
        hold = Path(os.environ["OPENAI_AGENTS_TEST_HOLD"])
        if calls and _first(hold / "held", json.dumps({"call_id": calls[0].call_id})):
            while not (hold / "release").exists():
                await asyncio.sleep(0.05)
        return response


def _first(path: Path, text: str) -> bool:
    """Write ``path`` unless it exists (atomically, across processes): True for the writer."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return True


agent = agent_for(lambda kit: Agent(name="errands", model=HeldModel()))
