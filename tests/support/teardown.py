"""A stopped test run tears down like Ctrl-C: pytest runs the fixtures' finalizers, which stop
every cluster component and engine the run started, by PID.

Without this, SIGTERM (harness/measure_tests.py stopping a run, CI's timeout, `kill`) ends pytest
at once and leaves them running: seen 2026-12-05, an apiserver, etcd, Kthena's controller and
router and two vLLM engines outlived a killed e2e. A job started in the background inherits
SIGINT ignored (POSIX shells without job control), so Ctrl-C's handler is put back for it."""

from __future__ import annotations

import signal
import threading
from types import FrameType


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def install() -> None:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does; SIGINT works again where it was ignored.
    Signal handlers can be set from the main thread only: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
