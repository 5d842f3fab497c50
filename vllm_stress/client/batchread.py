"""One reader per process for the bodies of every kernel-timed stream: an epoll set of their sockets, watched by
one greenlet, so that one wake-up reads every socket the server wrote to in an engine step instead of one greenlet
switch per chunk (docs/concepts/load-generator.md). Each read keeps its own kernel arrival time and read-behind
sample, as ``stream.read_body`` takes them."""

from __future__ import annotations

import contextlib
import os
import select
import time
from typing import TYPE_CHECKING

import gevent
from gevent.event import AsyncResult
from gevent.monkey import get_original

from vllm_stress.client.readbehind import read_behind
from vllm_stress.core.failures import StreamError
from vllm_stress.core.kernelclock import BOTH_ANCILLARY_SIZE, kernel_time

if TYPE_CHECKING:
    from geventhttpclient.response import HTTPSocketPoolResponse

    from vllm_stress.client.sse import SSEParser
    from vllm_stress.client.timedsocket import TimedSocket

READ_SIZE = 64 * 1024  # one read takes whatever the socket holds, up to this
TRUNCATED = "connection closed before the end of the body"


class Stream:
    """A body being read: its response (llhttp de-chunks into its body buffer), parser, socket, clock offset and
    the result its user waits on."""

    __slots__ = ("response", "body", "parser", "sock", "plain", "to_perf", "result")

    def __init__(self, response: HTTPSocketPoolResponse, parser: SSEParser, sock: TimedSocket, to_perf: float) -> None:
        self.response = response
        self.body = response._body_buffer  # private: the public read() would read the socket itself
        self.parser = parser
        self.sock = sock
        self.plain = sock._sock  # type: ignore[attr-defined]  # gevent's plain socket: read without waiting
        self.to_perf = to_perf  # kernel (unix) time -> perf_counter time of this request
        self.result: AsyncResult = AsyncResult()


class BatchReader:
    """This process's reader; ``read`` blocks its caller's greenlet until the body ended or failed."""

    def __init__(self) -> None:
        # gevent's monkey patching takes epoll out of the select module (its poll would block the process); this
        # set is only polled without waiting, once the hub says its file descriptor is readable
        self.poller = get_original("select", "epoll")()
        self.streams: dict[int, Stream] = {}
        self.running = False

    def read(self, response: HTTPSocketPoolResponse, parser: SSEParser, sock: TimedSocket, to_perf: float) -> None:
        """Read ``response``'s body to its end into ``parser`` (its bytes so far are parsed); raises its failure.
        On any way out, the socket leaves the set before the caller releases it."""
        fd = sock.fileno()
        stream = self.streams[fd] = Stream(response, parser, sock, to_perf)
        try:
            try:
                self.poller.register(fd, select.EPOLLIN)
            except FileExistsError:  # a closed socket of a stream that failed early had this number
                self.poller.modify(fd, select.EPOLLIN)
            if not self.running:
                self.running = True
                gevent.spawn(self.run)
            stream.result.get()
        finally:
            self.forget(fd)

    def forget(self, fd: int) -> None:
        if self.streams.pop(fd, None) is not None:
            with contextlib.suppress(OSError):  # a socket closed by its release has left the set already
                self.poller.unregister(fd)

    def run(self) -> None:
        """Wait for any socket of the set to be readable, read every one that is, until the set is empty."""
        hub = gevent.get_hub()
        watcher = hub.loop.io(self.poller.fileno(), 1)  # 1: readable
        try:
            while self.streams:
                hub.wait(watcher)
                self.read_ready()
        finally:  # the set is empty, or this greenlet was killed: its streams' users must not wait for it
            self.running = False
            watcher.close()
            for fd, stream in list(self.streams.items()):
                self.end(fd, stream, StreamError("ReaderStopped", "the process's stream reader was stopped"))

    def read_ready(self) -> None:
        """One pass over the readable sockets: one ``recvmsg`` each, timed by its kernel arrival time (else by
        perf_counter after it), de-chunked and parsed; a body that ended or failed wakes its user."""
        streams, clock, behind = self.streams, time.perf_counter, read_behind.samples.append
        for fd, _mask in self.poller.poll(0):
            stream = streams.get(fd)
            if stream is None:
                continue
            try:
                try:
                    data, ancillary, _flags, _address = stream.plain.recvmsg(READ_SIZE, BOTH_ANCILLARY_SIZE)
                except BlockingIOError:  # woken without data: by a send timestamp on the error queue
                    stream.sock.read_send_times()
                    continue
                if not data:
                    raise StreamError("StreamTruncated", TRUNCATED)
                arrived = kernel_time(ancillary)
                if arrived is None:
                    now = clock()
                else:
                    now = arrived + stream.to_perf
                    behind(clock() - now)
                response, body = stream.response, stream.body
                response.feed(data)
                if body:
                    stream.parser.feed(bytes(body), now)
                    del body[:]
                if response.message_complete:
                    self.end(fd, stream, None)
                elif response._sock is None:  # released: closed before the end
                    raise StreamError("StreamTruncated", TRUNCATED)
            except Exception as error:  # the stream's failure, raised in its user's greenlet
                self.end(fd, stream, error)

    def end(self, fd: int, stream: Stream, error: Exception | None) -> None:
        self.forget(fd)
        if error is None:
            stream.result.set(None)
        else:
            stream.result.set_exception(error)


readers: dict[tuple[int, int], BatchReader] = {}  # per process id and hub: a forked worker makes its own epoll set


def batch_reader() -> BatchReader:
    """The reader of this process and this thread's gevent hub (its greenlet can only run there)."""
    key = os.getpid(), id(gevent.get_hub())
    if key not in readers:
        readers[key] = BatchReader()
    return readers[key]
