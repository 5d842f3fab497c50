"""Child processes that end with the process that started them: each gets its own session (a Ctrl-C meant for the
parent reaches only the parent, which stops them in order) and, on Linux, a parent-death signal (``prctl``
``PR_SET_PDEATHSIG``), so that even a SIGKILLed parent leaves no load generator or server running."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None  # loaded before any fork


def end_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when its parent dies, and exits at once if ``parent`` is already
    gone (it died between the fork and the ``prctl``). It hears SIGINT even if the parent ignores it (a shell's
    background job does): the parent may stop it that way."""

    def arm() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if _PRCTL is not None and _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            os._exit(126)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def popen(command: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` in its own session, ended by SIGTERM when this process dies, however it dies. The
    parent-death signal is tied to the calling thread: call it from a thread that lives as long as the child."""
    return subprocess.Popen(command, start_new_session=True, preexec_fn=end_with(os.getpid()), **kwargs)
