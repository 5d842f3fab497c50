"""File descriptors a load-generating process needs: its limit (``RLIMIT_NOFILE``) raised as far as the hard limit
allows, and the one-line refusal of a level whose users would not get a socket each."""

from __future__ import annotations

import math
import resource

PER_USER = 1  # a user holds one keep-alive connection to each replica it sends to (its requests run one after another)
# what a process holds besides its users' sockets: about 15 (a worker running 200 users held 215 descriptors, 201 of
# them sockets, in /proc/PID/fd), with room for the prompts' /tokenize calls, the metrics port and a run's files
PROCESS_BASE = 128


def raise_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # a hard limit above the kernel's nr_open: keep what there is
            return soft
        return target
    return soft


def needed(users: int, replicas: int = 1) -> int:
    """Descriptors a process running ``users`` users needs, their requests spread over ``replicas`` servers (a user
    keeps a connection to each: 14,270 sockets per simulator of two held 20,000 streams, benchmarks/scale.md)."""
    return PROCESS_BASE + users * PER_USER * replicas


def refusal(level: int, processes: int, limit: int, replicas: int = 1) -> str:
    """Why a level of ``level`` users spread over ``processes`` load processes, each allowed ``limit`` descriptors
    (the lowest), sending to ``replicas`` servers, cannot be opened; "" when it can."""
    share = math.ceil(level / max(processes, 1))
    need = needed(share, replicas)
    if need <= limit:
        return ""
    where = f"in each of its {processes} worker processes" if processes > 1 else "in its load process"
    return (
        f"level {level} users needs about {need} file descriptors {where}, the limit is {limit} "
        "(ulimit -n; raise the hard limit, or add workers)"
    )
