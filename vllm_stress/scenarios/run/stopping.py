"""SIGTERM and SIGHUP stop a runner as Ctrl-C does (``timeout``, CI time limits, systemd and Kubernetes stop a
process with SIGTERM; a closed terminal sends SIGHUP): they raise :class:`Stopped`, a ``KeyboardInterrupt``, in the
main thread, so that the runner stops its Locust master (which closes the run folder as partial), its workers and its
server, writes the report of what it measured, and exits with 128 + the signal's number."""

from __future__ import annotations

import signal
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The runner was told to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The shell's code for a process ended by the signal: 128 + its number (130 for Ctrl-C)."""
    return 128 + (interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT)


def _stop(signum: int, _frame: FrameType | None) -> None:
    for each in SIGNALS:  # one stop: a second signal must not cut short the stopping of the children
        signal.signal(each, signal.SIG_IGN)
    raise Stopped(signum)


def stop_on_signals() -> None:
    """From now on SIGTERM and SIGHUP raise :class:`Stopped` in the main thread (a command's entry point calls it)."""
    for each in SIGNALS:
        signal.signal(each, _stop)
