"""The core process tests again, on RabbitMQ (Celery's first broker) with PostgreSQL, set up
as a user would: ``WAKEFUL_BROKER_URL=amqp://...`` and nothing else (the result backend is
the default for AMQP, ``rpc://``). Each test gets its own virtual host.

The tests are test_runtime_processes.py's own, imported: pytest runs them here with this
module's ``backend`` (only ``rabbit_pg``), so there is one copy of each rule's test.
"""

from __future__ import annotations

import pytest

from test_runtime_processes import (  # noqa: F401 - collected here, on RabbitMQ
    test_burst_is_one_batch,
    test_plain_client_send_task_stores_once_and_runs_once,
    test_poison_goes_dead_and_its_neighbour_is_done,
    test_recurring_timer_fires_through_beat,
    test_worker_killed_mid_run_another_worker_finishes_with_attempts_2,
)

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.rabbitmq]


@pytest.fixture
def backend() -> str:
    return "rabbit_pg"
