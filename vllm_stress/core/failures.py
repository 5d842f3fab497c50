"""How a request failed, named once for every client of the suite (the Locust users, the SDK user, the
parallel-query runner): the row's ``error`` column and Locust's failure message."""

from __future__ import annotations

import errno
import http.client
import ssl


class StreamError(Exception):
    """A failure inside a response whose HTTP status was fine; its ``name`` becomes the row's error class."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(f"{name}: {detail}" if detail else name)
        self.name = name


def failure_name(exc: BaseException) -> str:
    """A stable, readable failure class for an exception raised while sending or reading a request."""
    original = getattr(exc, "original", None)  # geventhttpclient's RetriesExceeded wraps the real error
    if isinstance(original, BaseException):
        return failure_name(original)
    if isinstance(exc, StreamError):
        return exc.name
    if isinstance(exc, TimeoutError) or is_gevent_timeout(exc):  # socket.timeout is TimeoutError
        return "Timeout"
    if isinstance(exc, ConnectionRefusedError) or (isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED):
        return "ConnectionRefused"  # the second form: aiohttp's ClientConnectorError carries the errno
    if isinstance(exc, OSError) and exc.errno == errno.EADDRNOTAVAIL:  # connect: no local port left
        return "NoLocalPort"
    if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
        return "TooManyOpenFiles"
    if isinstance(exc, ssl.SSLError):  # e.g. an untrusted certificate (see --insecure)
        return "TLSError"
    if isinstance(exc, (http.client.HTTPException, ConnectionError, OSError)):
        return "StreamTruncated"  # geventhttpclient's HTTPParseError is an HTTPException: a cut or garbled response
    if isinstance(exc, ValueError):
        return "MalformedJSON"
    return type(exc).__name__


def is_gevent_timeout(exc: BaseException) -> bool:
    """gevent's Timeout (the Locust users' deadlines), known by its class so that the core does not import gevent."""
    return any(cls.__module__.startswith("gevent") and cls.__name__ == "Timeout" for cls in type(exc).__mro__)
