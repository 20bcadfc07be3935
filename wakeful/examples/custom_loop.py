"""A custom agent loop on wakeful's tool kit (docs/agent.md, "Your own loop").

    WAKEFUL_AGENT=wakeful.examples.custom_loop:agent
    WAKEFUL_AGENT_CONFIG=agent.toml        # its [tools.*] tables: the same file the claude agent reads

The "model" is a stand-in that needs no network, so the example runs anywhere: a line
``call NAME {json}`` in the text it reads is a tool call. Put your model's call in ``plan``;
the rest is what any loop does with the kit:

1. ``Toolkit(run)`` reads the batch: what came back for earlier tool uses (``results``:
   an effect's result, a human's yes / no) and the new events (``events``);
2. each tool call the model asks for goes through ``kit.use``: refused, run now (an
   allowed read) or proposed as an effect (a write: after this run's finish, once; with a
   human's yes first when the policy or untrusted text asks for it);
3. ``kit.outcome`` is the run's Outcome, with the effects, the answers read and the kit's
   state; the runtime commits it in the fenced finish.
"""

from __future__ import annotations

import json
import re
from typing import Any

from wakeful import BudgetReached, Outcome, Run, Toolkit

_CALL = re.compile(r"^call (\S+) (\{.*\})\s*$", re.MULTILINE)


def plan(text: str) -> list[tuple[str, Any]]:
    """The stand-in for a model: the tool calls it makes after reading ``text``. Like a
    model it follows what it reads, data included: the kit's taint is what keeps a write an
    outsider asked for from running without a human's yes."""
    calls = []
    for name, args in _CALL.findall(text):
        try:
            calls.append((name, json.loads(args)))
        except ValueError:
            calls.append((name, args))  # the policy refuses an input that is not an object
    return calls


def agent(run: Run) -> Outcome:
    kit = Toolkit(run)
    try:
        kit.model_call()  # before each model call: the lease, and the day's [budget]
    except BudgetReached as reached:  # no call today: this run's input comes again tomorrow
        return kit.stopped(reached)
    said: list[str] = []
    for result in kit.results:  # earlier tool uses: an effect's result, or a human's answer
        if result.final:  # "approved": the write runs after this finish, its result comes later
            said.append(f"{result.tool}: {result.content}")
    for event in kit.events:
        text = kit.text(event)  # an untrusted sender's text arrives wrapped as data
        for name, args in plan(text):
            run.heartbeat()  # a long loop stops early once the lease is lost
            use = kit.use(name, args, words=f"you asked me to {name}")
            if use.status == "asked":
                said.append(f"{name}: waiting for your yes")
            elif use.status == "proposed":
                said.append(f"{name}: on its way")
            else:  # "done" / "error" (a read ran) or "refused"
                said.append(f"{name}: {use.content}")
    return kit.outcome(messages=["\n".join(said)] if said else [])
