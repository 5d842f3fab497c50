"""Linux's timestamps of TCP bytes: when they arrived (``SO_TIMESTAMPNS``) and when they left (``SO_TIMESTAMPING``),
for the load generator's chunk and send times and the simulator's request arrivals (docs/concepts/metrics.md)."""

from __future__ import annotations

import platform
import socket
import struct
import sys

# Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) in asm-generic/socket.h; Python's socket module does not export it.
# Other values on alpha, mips, parisc and sparc: no kernel clock there.
SO_TIMESTAMPNS = 35
SO_TIMESTAMPING = 37  # = SCM_TIMESTAMPING; its control message holds three timespecs, the software one first
SEND_TIMESTAMPS = (1 << 1) | (1 << 4) | (1 << 11)  # SOF_TIMESTAMPING_TX_SOFTWARE | _SOFTWARE | _OPT_TSONLY
MSG_ERRQUEUE = 0x2000
TIMESPEC = struct.Struct("qq")  # struct timespec on 64-bit Linux: seconds, nanoseconds
ANCILLARY_SIZE = socket.CMSG_SPACE(TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# a read of a socket with both options: SCM_TIMESTAMPNS, and an SCM_TIMESTAMPING (or, on the error queue, the
# sock_extended_err that comes with it)
BOTH_ANCILLARY_SIZE = socket.CMSG_SPACE(3 * TIMESPEC.size) * 2 + ANCILLARY_SIZE if ANCILLARY_SIZE else 0
KERNEL_PLATFORM = (
    sys.platform == "linux"
    and struct.calcsize("P") == 8
    and not platform.machine().startswith(("alpha", "mips", "parisc", "sparc"))
)


def kernel_time(ancillary: list[tuple[int, int, bytes]], option: int = SO_TIMESTAMPNS) -> float | None:
    """The CLOCK_REALTIME seconds of an SCM_TIMESTAMPNS control message (or, with ``option`` SO_TIMESTAMPING, the
    software time of an SCM_TIMESTAMPING one), if the read returned one."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == option and len(data) >= TIMESPEC.size:
            seconds, nanoseconds = TIMESPEC.unpack_from(data)
            return float(seconds + nanoseconds * 1e-9)
    return None
