"""The agent plug-in interface.

An agent is a callable ``agent(run: Run) -> Outcome | None``. It reads ``run.events`` (the
batch claimed for this run, oldest first) and ``run.memory``, and returns what should happen:
messages, approval requests, timers and memory writes. It does no side effects of its own
that matter twice: the Outcome is applied in one fenced transaction, all of it or none.

An exception fails the run: its events go back to pending after a backoff, and to dead at the
attempt cap. :class:`TryLater` (wakeful/agent/outage.py) says instead that something the agent needs
is down (its model API, a tool's upstream): the attempt is given back and the events wait
the outage out, up to ``WAKEFUL_OUTAGE_HORIZON``. The runtime renews the lease in the background while the agent runs (for up to
the task's time limit), so a slow model call does not lose the inbox. A long step may still
call ``run.heartbeat()``: it renews at once and raises :class:`LeaseLost` once another worker
has taken the inbox over (this process stalled), so the run stops early instead of doing work
whose finish would be refused anyway.

Daily budgets (store/spend.py, docs/agent.md "Budgets"): an agent that calls a model asks
``run.check_budget(budget)`` before each call (``BudgetReached``: the call must not be made)
and tells ``run.count_spend(budget, usage)`` right after it; the runtime wires both to the
store, so a custom loop gets the same ceilings as the built-in agent.

Choose the agent with ``WAKEFUL_AGENT=module:callable``, or ``WAKEFUL_AGENT=claude`` for the
built-in Claude agent (wakeful/agent/claude.py, configured by ``WAKEFUL_AGENT_CONFIG``).

This package only names the interface; each part is defined in its own module: ``Run``,
``LeaseLost``, ``BudgetReached`` and ``Agent`` in wakeful/agent/run.py, ``TryLater`` in
wakeful/agent/outage.py, ``load_agent`` and ``summary_of`` in wakeful/agent/plugin.py, the ``module:callable``
loader in wakeful/agent/loading.py. Modules inside wakeful/agent/ import those modules, never this package,
so that no import cycle runs through it (tests/architecture/test_import_cycles.py).
"""

from wakeful.agent.outage import TryLater
from wakeful.agent.plugin import load_agent, summary_of
from wakeful.agent.run import Agent, BudgetReached, LeaseLost, Run

__all__ = ["Agent", "BudgetReached", "LeaseLost", "Run", "TryLater", "load_agent", "summary_of"]
