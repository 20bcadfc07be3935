"""``python -m store.next_migration``: the plan functions (store/plans.py) the code expects
and the migrations do not define as written, printed as the next migration's ``FUNCTIONS``
(and ``DROPPED_FUNCTIONS``); exit status 1 when there are any.

A module of its own above the store's front (``store.store`` imports every module that
caches a statement, which is what registers them): store/migrate.py stays below the front,
which calls it.
"""

from __future__ import annotations

import sys

from . import plans
from . import store as _front  # noqa: F401  (registers every cached statement)
from .migrate import format_functions, plan_functions


def main() -> int:
    expected = {p.name: p.create for p in plans.registered()}
    written = plan_functions()
    changed = {name: create for name, create in expected.items() if written.get(name) != create}
    dropped = sorted(set(written) - set(expected))
    if not changed and not dropped:
        print("the migrations define every plan function as the code expects")
        return 0
    print(format_functions(changed), end="")
    if dropped:
        print(f"DROPPED_FUNCTIONS = {dropped!r}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
