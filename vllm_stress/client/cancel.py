"""Client cancellations (--cancel-share, --cancel-after): a share of requests the client cuts on purpose, after a
delay from the send or after a number of output chunks, closing the connection as a client that went away does."""

from __future__ import annotations

import argparse
import random
import re
import time
from dataclasses import dataclass

import gevent

from vllm_stress.core.failures import StreamError
from vllm_stress.core.schema import CANCELLED

AFTER = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(s|ms|tokens?)\s*$")


@dataclass(frozen=True)
class CancelAfter:
    """Where a drawn request is cut: ``seconds`` after its send, or at its ``tokens``-th output chunk."""

    label: str  # as the row's cancel_after says it: "2s", "500ms", "20tokens"
    seconds: float | None = None
    tokens: int | None = None


def parse_after(text: str) -> CancelAfter:
    """``2s``, ``500ms`` or ``20tokens`` (ValueError otherwise)."""
    match = AFTER.match(text)
    if not match or float(match[1]) <= 0:
        raise ValueError(f"--cancel-after {text!r}: a delay (2s, 500ms) or a token count (20tokens), above 0")
    number, unit = float(match[1]), match[2]
    if unit.startswith("token"):
        if not number.is_integer():
            raise ValueError(f"--cancel-after {text!r}: a whole number of tokens")
        return CancelAfter(f"{int(number)}tokens", tokens=int(number))
    return CancelAfter(f"{match[1]}{unit}", seconds=number / 1000 if unit == "ms" else number)


class Cancellations:
    """This process's draw of the requests it cancels: each with probability ``share``, seeded."""

    def __init__(self, share: float, after: CancelAfter, seed: str | None = None) -> None:
        self.share = share
        self.after = after
        self.rng = random.Random(seed)

    def draw(self) -> CancelAfter | None:
        return self.after if self.rng.random() < self.share else None


def cancellations_for(options: argparse.Namespace, seed: str | None = None) -> Cancellations | None:
    """The process's cancellations for --cancel-share (None without); ValueError for a bad option."""
    share = getattr(options, "cancel_share", 0.0) or 0.0
    if not share:
        return None
    if not 0 < share <= 1:
        raise ValueError(f"--cancel-share {share}: a share in (0, 1]")
    return Cancellations(share, parse_after(options.cancel_after), seed)


class Cancelled(StreamError):
    """The client cut the request where its cancellation fell (its row's error: Cancelled)."""

    def __init__(self) -> None:
        super().__init__(CANCELLED, "cancelled by the client (--cancel-after)")


def check_options(options: argparse.Namespace) -> None:
    """ValueError, in one line, for stress options no run can use: --cancel-share, --cancel-after, --burstiness."""
    cancellations_for(options)
    if not getattr(options, "burstiness", 1.0) > 0:
        raise ValueError(f"--burstiness {options.burstiness:g}: above 0")


def cancelled() -> Cancelled:
    return Cancelled()


def deadline(start: float, remaining_s: float, cancel: CancelAfter | None) -> gevent.Timeout:
    """The deadline of reading a request's answer: its timeout, ``remaining_s`` from now (a Timeout failure), or its
    cancellation's delay from its send at ``start`` (perf_counter seconds) when that comes first (Cancelled)."""
    if cancel is not None and cancel.seconds is not None:
        until_cut = cancel.seconds - (time.perf_counter() - start)
        if until_cut < remaining_s:
            return gevent.Timeout(max(until_cut, 0.0), cancelled())
    return gevent.Timeout(remaining_s, StreamError("Timeout"))
