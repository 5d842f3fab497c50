"""The local addresses a process's connections leave from (``--source-addresses``), taken in turn, and the one line
that says when a connection finds no local port left.

A TCP connection is (source address, source port, server address, server port): one source address reaches one
server with at most the ephemeral port range (``net.ipv4.ip_local_port_range``, about 28,000 ports by default);
each more source address adds as many. ``IP_BIND_ADDRESS_NO_PORT`` lets the kernel pick the port at ``connect``, per
server, instead of at ``bind``, reserved for every server (Linux's ip(7))."""

from __future__ import annotations

import errno
import ipaddress
import itertools
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter

log = logging.getLogger(__name__)

IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux's value (in.h)
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


class SourceAddresses:
    """The process's source addresses in turn (none: the kernel picks), and whether it said it ran out of ports."""

    def __init__(self) -> None:
        self.addresses: list[str] = []
        self.turn: Iterator[str] = iter(())
        self.said_out_of_ports = False

    def use(self, text: str) -> None:
        """Take ``--source-addresses`` (comma-separated IPv4 addresses, each this host's: else ValueError with the
        address and the reason)."""
        addresses = [part.strip() for part in text.split(",") if part.strip()]
        for address in addresses:
            if ipaddress.ip_address(address).version != 4:
                raise ValueError(f"{address}: an IPv4 address (the suite binds IPv4 sockets)")
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((address, 0))
                except OSError as e:
                    raise ValueError(f"{address}: {e.strerror or e} (not an address of this host)") from None
        self.addresses = addresses
        self.turn = itertools.cycle(addresses)
        self.said_out_of_ports = False

    def bind(self, sock: socket.socket) -> None:
        """Bind ``sock`` (before its connect) to the next source address; the port is picked at connect."""
        if not self.addresses:
            return
        sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((next(self.turn), 0))

    def http_session(self) -> requests.Session:
        """A ``requests`` session for the checks before users start (``/v1/models``, ``/tokenize``): its connections
        leave from the next source address, as the users' do (from where the kernel picks without addresses)."""
        session = requests.Session()
        if self.addresses:
            adapter = SourceAdapter(next(self.turn))
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        return session

    def out_of_ports(self, exc: OSError, server: str) -> None:
        """On a connect's ``EADDRNOTAVAIL``: one ERROR line per process with the numbers (the failed requests count
        as ``NoLocalPort``)."""
        if exc.errno != errno.EADDRNOTAVAIL or self.said_out_of_ports:
            return
        self.said_out_of_ports = True
        low, high = port_range()
        sources = ", ".join(self.addresses) if self.addresses else "the one the kernel picks"
        log.error(
            "no local port left to connect to %s: about %d ports (%d-%d, net.ipv4.ip_local_port_range) per source "
            "address, from %s; add addresses with --source-addresses, or workers on other hosts",
            server,
            high - low + 1,
            low,
            high,
            sources,
        )


class SourceAdapter(HTTPAdapter):
    """urllib3's connection pools of a session, their sockets bound to one source address (any port)."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args: object, **kwargs: object) -> None:
        super().init_poolmanager(*args, **kwargs, source_address=(self.address, 0))  # type: ignore[arg-type]


def port_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = map(int, PORT_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


SOURCES = SourceAddresses()  # the process's
