"""Cleanup that a second Ctrl-C must not cut short.

The first Ctrl-C (or SIGTERM) starts stopping an engine and recording the trial as interrupted; an
impatient second one used to land inside that cleanup, leaving the engine running and the trial
RUNNING in the storage. Inside ``deferred`` such signals are only remembered, and raised as
KeyboardInterrupt once the cleanup is done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends (main thread only: elsewhere signals are
    delivered to the main thread anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if arrived:
        raise KeyboardInterrupt
