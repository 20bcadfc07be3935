"""Shift this process's wall clock by WAKEFUL_TEST_TIME_SHIFT seconds (scenario 10's fallback
when libfaketime is not installed). Monotonic clocks are left alone, as libfaketime is told to."""

import os
import time

_shift = float(os.environ.get("WAKEFUL_TEST_TIME_SHIFT", "0") or 0)
if _shift:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _shift  # type: ignore[assignment]
    time.time_ns = lambda: _time_ns() + int(_shift * 1e9)  # type: ignore[assignment]
