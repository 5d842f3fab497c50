"""A leaking server, for a soak to find (--leak-step-ms-per-min, --leak-mb-per-min): each engine step takes longer, and
the process holds more memory, the longer the engine has run (docs/guides/stress.md, "Soak"). Both grow with the
engine's clock from its first step (wall time at --time-scale 1)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

MIB = 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--leak-step-ms-per-min",
        type=float,
        default=0.0,
        metavar="MS",
        help="a leak: every engine step takes MS milliseconds longer per minute the engine has run (%(default)s: none)",
    )
    parser.add_argument(
        "--leak-mb-per-min",
        type=float,
        default=0.0,
        metavar="MB",
        help="a leak: the process holds MB more MiB of memory per minute the engine has run, visible in its "
        "process_resident_memory_bytes (%(default)s: none)",
    )


@dataclass
class Leak:
    """What leaks per minute of engine time, and the memory held so far."""

    step_ms_per_min: float
    mb_per_min: float
    origin: float | None = None  # the engine clock at the first step
    held: list[bytearray] = field(default_factory=list)

    def step_s(self, clock: float) -> float:
        """The extra seconds of a step at engine time ``clock``; grows the memory held to its share by then."""
        self.origin = clock if self.origin is None else self.origin
        minutes = (clock - self.origin) / 60
        missing = int(self.mb_per_min * minutes * MIB) - len(self.held) * MIB
        for _ in range(max(0, missing) // MIB):
            self.held.append(bytearray(b"\x01") * MIB)  # written: resident, not a zero page
        return self.step_ms_per_min * minutes / 1000


def leak_from_args(args: argparse.Namespace) -> Leak | None:
    """The leak the flags ask for, or None; ValueError for a negative rate."""
    if args.leak_step_ms_per_min < 0 or args.leak_mb_per_min < 0:
        raise ValueError("--leak-step-ms-per-min and --leak-mb-per-min must not be negative")
    return (
        Leak(args.leak_step_ms_per_min, args.leak_mb_per_min)
        if args.leak_step_ms_per_min or args.leak_mb_per_min
        else None
    )
