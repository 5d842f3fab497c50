"""The connections a user's requests go on: geventhttpclient's connection pools, made to time each connection they
open (TCP connect and, to an https:// target, TLS handshake: the row's ``connect_s``), to keep none past its request
(``--connections per-request``), and, under the kernel clock, to open :class:`TimedSocket` connections bound to the
process's next source address (sourceaddr.py). docs/guides/stress.md, "Connection churn", says what each mode does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import gevent.local
import gevent.socket
from geventhttpclient.client import HTTPClient, HTTPClientPool
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.url import URL

from vllm_stress.client.sourceaddr import SOURCES
from vllm_stress.client.timedsocket import TimedSocket
from vllm_stress.core.schema import PER_REQUEST, PER_SESSION

if TYPE_CHECKING:
    from locust.contrib.fasthttp import FastHttpSession

_opened = gevent.local.local()  # per greenlet: the seconds its last connection took to open (None: none opened)


def opening() -> None:
    """This greenlet's request is about to be sent: no connection opened for it yet."""
    _opened.seconds = None


def opened() -> float | None:
    """Seconds the connection this greenlet's request opened took (TCP connect and TLS handshake), None when the
    request reused a pooled connection."""
    seconds: float | None = getattr(_opened, "seconds", None)
    return seconds


class ClockedPool(ConnectionPool):
    """geventhttpclient's connection pool, timing each connection it opens into the greenlet that opened it; a
    ``one_use`` pool closes each connection when its request is over instead of keeping it."""

    one_use = False

    def _connect_socket(self, sock: gevent.socket.socket, address: Any) -> gevent.socket.socket:
        began = time.perf_counter()
        connected = super()._connect_socket(sock, address)  # the TLS pool's wraps the handshake in
        _opened.seconds = time.perf_counter() - began
        return connected

    def return_socket(self, sock: gevent.socket.socket) -> None:
        if self.one_use:
            self.release_socket(sock)  # closed, its slot freed: the next request opens its own
        else:
            super().return_socket(sock)


class ClockedSSLPool(ClockedPool, SSLConnectionPool):
    """The TLS pool, its connect and handshake timed together."""


class TimedConnectionPool(ClockedPool):
    """The plain-HTTP pool with :class:`TimedSocket` connections, made in its socket factory (the place its
    docstring gives to change the socket), each bound to the process's next source address (sourceaddr.py)."""

    def _create_tcp_socket(self, family: int, socktype: int, protocol: int) -> gevent.socket.socket:
        sock = TimedSocket(family, socktype, protocol)
        SOURCES.bind(sock)
        return sock

    def _connect_socket(self, sock: gevent.socket.socket, address: Any) -> gevent.socket.socket:
        try:
            return super()._connect_socket(sock, address)
        except OSError as e:
            SOURCES.out_of_ports(e, f"{address[0]}:{address[1]}")
            raise

    def return_socket(self, sock: gevent.socket.socket) -> None:
        if isinstance(sock, TimedSocket):  # a send timestamp left on its error queue polls as readable, which
            sock.read_send_times()  # geventhttpclient's check of an idle connection takes for a closed one
        super().return_socket(sock)


class TimedClientPool(HTTPClientPool):
    """geventhttpclient's per-host client factory whose clients' pools are clocked (:class:`ClockedPool`): with
    ``timed``, a plain-HTTP client's connections are :class:`TimedSocket` objects (TLS is decrypted in user space:
    the kernel's time is not the chunk's); with ``one_use``, no connection outlives its request."""

    def __init__(self, *, timed: bool = True, one_use: bool = False, **client_args: Any) -> None:
        super().__init__(**client_args)
        self.timed = timed
        self.one_use = one_use

    def get_client(self, url: str | URL) -> HTTPClient:
        client = super().get_client(url)
        pool = client._connection_pool
        if not isinstance(pool, ClockedPool):
            # HTTPClient builds its pool inline (no argument picks the class): the pool it made becomes ours
            plain = TimedConnectionPool if self.timed else ClockedPool
            pool.__class__ = ClockedSSLPool if client.ssl else plain
            pool.one_use = self.one_use  # type: ignore[attr-defined]  # a ClockedPool's now
        return client


def use_pools(session: FastHttpSession, timed: bool, mode: str) -> None:
    """Make a Locust ``FastHttpSession``'s connection pools clocked (its geventhttpclient ``UserAgent`` is
    ``session.client``; its ``clientpool`` is rebuilt with the same arguments): ``timed`` for the kernel clock,
    ``mode`` one of ``vllm_stress.core.schema.CONNECTION_MODES``."""
    agent = session.client
    agent.clientpool = TimedClientPool(timed=timed, one_use=mode == PER_REQUEST, **agent.clientpool.client_args)


def new_session(session: FastHttpSession, mode: str) -> None:
    """A session user's next conversation (an agent's next task) starts: per-session, its connections are closed so
    that it opens new ones (geventhttpclient's public ``UserAgent.close``; the next request makes new clients)."""
    if mode == PER_SESSION:
        session.client.close()
