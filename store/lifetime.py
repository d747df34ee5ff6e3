"""Helper processes never outlive profdb.

An ingest's parsing workers (``ingest_workers``) block on their pipe to the writer or on a read;
if the writer is killed outright (SIGKILL, the OOM killer) nothing tells them, and the pipe does not
close while a sibling worker, forked later, still holds the writer's end. ``die_with_parent()``,
called first thing in each worker, asks Linux to kill the worker when its parent dies
(``PR_SET_PDEATHSIG``); elsewhere a daemon thread notices the parent is gone within a second."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

_PR_SET_PDEATHSIG = 1
#: seconds between checks of the parent, where prctl is not available
POLL_S = 1.0


def leave_signals_to_parent() -> None:
    """A worker ignores Ctrl-C (the terminal sends SIGINT to the whole process group: the writer
    alone decides, rolls back and stops its workers) and dies at once on SIGTERM, whatever handler
    it inherited from the writer (``profdb``'s raises an exception to unwind the command)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the writer while forking


#: the signals that stop profdb (cli/main.py); blocked while workers are forked (``starting_workers``)
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def starting_workers() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while worker processes are forked: a signal handled in the middle of
    ``fork`` (in its at-fork hooks, where Python ignores exceptions) would be lost; held, it is
    handled once the workers exist, and the caller stops them while unwinding."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def die_with_parent() -> None:
    """Kill this process (SIGKILL) as soon as the process that started it exits (also when it
    exited already, before this call: the parent's pid is the one multiprocessing recorded)."""
    started_by = multiprocessing.parent_process()
    parent = started_by.pid if started_by is not None and started_by.pid else os.getppid()
    if sys.platform.startswith("linux"):
        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None
        if prctl is not None and prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
            return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="profdb-parent-watch", daemon=True).start()
