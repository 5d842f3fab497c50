"""The socket that times a streamed response's bytes: a gevent TCP socket keeping the kernel's arrival time of what
it reads and the time what it sent left; pools.py's connection pools make them, the batch reader (batchread.py) reads
them."""

from __future__ import annotations

import socket

import gevent.socket

from vllm_stress.core.kernelclock import (
    BOTH_ANCILLARY_SIZE,
    MSG_ERRQUEUE,
    SEND_TIMESTAMPS,
    SO_TIMESTAMPING,
    SO_TIMESTAMPNS,
    kernel_time,
)


class TimedSocket(gevent.socket.socket):
    """A gevent TCP socket that keeps the kernel's arrival time of the bytes its last read returned (``arrived``,
    CLOCK_REALTIME seconds, None without a timestamp) and the time the last bytes it sent left (``left``)."""

    __slots__ = ("arrived", "left")

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None) -> None:
        super().__init__(family, type, proto, fileno)
        self.arrived: float | None = None
        self.left: float | None = None
        self.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, SEND_TIMESTAMPS)

    def recv(self, size: int, flags: int = 0) -> bytes:
        # Wait first, then read the plain socket: gevent's own recvmsg reads first and, the body's bytes being all
        # taken, pays a failed syscall and an exception per chunk before it waits. The plain socket and the read
        # watcher are gevent's (_sock, _wait, _read_event: a subclass's, no public API waits on its own watcher);
        # types-gevent leaves these private members out.
        wait, readable, plain = self._wait, self._read_event, self._sock  # type: ignore[attr-defined]
        while True:
            wait(readable)
            try:
                data, ancillary, _flags, _address = plain.recvmsg(size, BOTH_ANCILLARY_SIZE, flags)
            except BlockingIOError:  # woken without data: by a send timestamp on the error queue
                self.read_send_times()
                continue
            self.arrived = kernel_time(ancillary)
            return data

    def read_send_times(self) -> None:
        """Take the send timestamps off the error queue (while one waits there, the socket polls as readable):
        the newest, the time the last bytes sent so far left, becomes ``left``."""
        plain = self._sock  # type: ignore[attr-defined]  # gevent's plain socket (as in recv)
        while True:
            try:
                _data, ancillary, _flags, _address = plain.recvmsg(0, BOTH_ANCILLARY_SIZE, MSG_ERRQUEUE)
            except (BlockingIOError, OSError):
                return
            self.left = kernel_time(ancillary, SO_TIMESTAMPING) or self.left
