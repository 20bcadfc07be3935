"""The ``[budget]`` table of the agent's config: daily ceilings and the price table.

```toml
[budget]
inbox_tokens_per_day = 200000     # each inbox, per UTC day
inbox_money_per_day = 2.0         # each inbox (needs a price for [agent] model)
agent_tokens_per_day = 5000000    # all inboxes of this agent together
agent_money_per_day = 50.0
agent_name = "support"            # the name the agent's spend is counted under
notice = "..."                    # what the inbox's user is told, once a day

[budget.prices."claude-sonnet-4-5"]   # per million tokens, any one currency
input = 3.0
output = 15.0
cache_write = 3.75                # optional: 1.25 x input
cache_read = 0.3                  # optional: 0.1 x input
```

What is counted and when is store/spend.py's; docs/agent.md, "Budgets", says it for users.
"""

from __future__ import annotations

from typing import Any

from store.spend import DEFAULT_NOTICE, Budget, Price
from store.tables import INBOX_MAX

DEFAULT_AGENT_NAME = "claude"
_KEYS = {"inbox_tokens_per_day", "inbox_money_per_day", "agent_tokens_per_day", "agent_money_per_day",
         "agent_name", "notice", "prices"}
_PRICE_KEYS = {"input", "output", "cache_write", "cache_read"}


def default() -> Budget:
    """No ceiling: every call is still counted, under the default agent name."""
    return Budget(agent=DEFAULT_AGENT_NAME)


def parse(path: str, table: Any, model: str) -> Budget:
    """The ``[budget]`` table (absent: no ceiling, calls still counted) for ``model``.
    Raises ValueError naming the file, the table and the key."""
    if table is None:
        return default()
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [budget] must be a table")
    unknown = set(table) - _KEYS
    if unknown:
        raise ValueError(f"{path}: [budget]: unknown key(s) {', '.join(sorted(unknown))}")
    name = table.get("agent_name", DEFAULT_AGENT_NAME)
    if not isinstance(name, str) or not name.strip() or len(name) > INBOX_MAX:
        raise ValueError(f"{path}: [budget] agent_name must be a non-empty string of at most "
                         f"{INBOX_MAX} characters")
    notice = table.get("notice", DEFAULT_NOTICE)
    if not isinstance(notice, str) or not notice.strip():
        raise ValueError(f"{path}: [budget] notice must be a non-empty string")
    prices = _prices(path, table.get("prices", {}))
    budget = Budget(agent=name, notice=notice, prices=prices,
                    inbox_tokens=_tokens(path, table, "inbox_tokens_per_day"),
                    agent_tokens=_tokens(path, table, "agent_tokens_per_day"),
                    inbox_money=_money(path, table, "inbox_money_per_day"),
                    agent_money=_money(path, table, "agent_money_per_day"))
    if (budget.inbox_money is not None or budget.agent_money is not None) and model not in prices:
        raise ValueError(f"{path}: [budget] a money ceiling needs a price for the model {model!r}: "
                         f"add [budget.prices.\"{model}\"] with input and output")
    return budget


def _tokens(path: str, table: dict[str, Any], key: str) -> int | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{path}: [budget] {key} must be a positive whole number of tokens, got {value!r}")
    return value


def _money(path: str, table: dict[str, Any], key: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{path}: [budget] {key} must be a positive amount, got {value!r}")
    return float(value)


def _prices(path: str, table: Any) -> dict[str, Price]:
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [budget.prices] must hold one [budget.prices.\"MODEL\"] table per model")
    prices = {}
    for model, spec in table.items():
        where = f"[budget.prices.\"{model}\"]"
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: {where} must be a table with input and output")
        unknown = set(spec) - _PRICE_KEYS
        if unknown:
            raise ValueError(f"{path}: {where}: unknown key(s) {', '.join(sorted(unknown))}")
        for key in _PRICE_KEYS:
            value = spec.get(key)
            if value is None and key in ("input", "output"):
                raise ValueError(f"{path}: {where}: `{key}` (per million tokens) is required")
            if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value < 0):
                raise ValueError(f"{path}: {where}: {key} must be a price >= 0 per million tokens, got {value!r}")
        prices[model] = Price(**{k: float(v) for k, v in spec.items()})
    return prices
