"""Load shapes beyond the step ramp (``--shape``): a spike, a day compressed into minutes, a trace's own rate or a soak
(one long constant load, checked for drift: docs/guides/stress.md, "Soak"), each made of constant stretches of users. Each stretch is a level the report judges, the first time its user count runs
(levels are named by their users); a later stretch at a count already judged runs unjudged (docs/guides/elastic-fleets.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_stress.client.trace import TraceLine
from vllm_stress.core.drift import SOAK
from vllm_stress.core.workingset import WORKING_SET, sweep_contexts

STEPS = "steps"  # --shape steps: the step ramp of --levels (scenarios/shape.py)
DIURNAL_STEPS = 24  # a sinusoid day's stretches: one per hour
GRAMMAR = (
    "steps | spike:BASE,PEAK,AT_S,FOR_S,TOTAL_S | diurnal:MINUTES,LOW,HIGH[,STEPS] | diurnal:MINUTES,U1/U2/... | "
    "trace:WINDOW_S | soak:HOURS[,USERS] | working-set:C1,C2,..."
)


@dataclass(frozen=True)
class Stretch:
    """``users`` for ``seconds``."""

    users: int
    seconds: float


def spike(base: int, peak: int, at_s: float, for_s: float, total_s: float) -> list[Stretch]:
    """``base`` users, ``peak`` users from ``at_s`` for ``for_s`` seconds, then ``base`` again until ``total_s``."""
    if not (0 < at_s and for_s > 0 and at_s + for_s <= total_s):
        raise ValueError(
            f"--shape spike: needs 0 < AT_S and AT_S + FOR_S <= TOTAL_S, got {at_s:g}, {for_s:g}, {total_s:g}"
        )
    return merged([Stretch(base, at_s), Stretch(peak, for_s), Stretch(base, total_s - at_s - for_s)])


def diurnal(minutes: float, hourly: list[int]) -> list[Stretch]:
    """A day of ``hourly`` levels (any number of equal parts) compressed into ``minutes``."""
    return merged([Stretch(users, minutes * 60 / len(hourly)) for users in hourly])


def sinusoid(low: int, high: int, steps: int = DIURNAL_STEPS) -> list[int]:
    """``steps`` levels of a day: ``low`` at midnight, ``high`` at noon, a cosine between (each part's middle)."""
    return [round(low + (high - low) * (1 - math.cos(2 * math.pi * (i + 0.5) / steps)) / 2) for i in range(steps)]


def trace_rate(lines: list[TraceLine], window_s: float) -> list[Stretch]:
    """A trace's own rate in windows of ``window_s`` (times after --speedup): each window as many users as requests
    arrive in it, so every one of them can be in flight at once (the users only cap an open loop: the trace's times
    send the requests)."""
    if not lines or window_s <= 0:
        raise ValueError("--shape trace: needs --trace with requests, and WINDOW_S > 0")
    windows = math.floor(lines[-1].at_s / window_s) + 1
    counts = [0] * windows
    for line in lines:
        counts[min(int(line.at_s // window_s), windows - 1)] += 1
    return merged([Stretch(max(count, 1), window_s) for count in counts])


def soak(hours: float, users_: int) -> list[Stretch]:
    """``users_`` users for ``hours`` hours: one stretch, one level, its hold cut into windows by the analysis."""
    if hours <= 0:
        raise ValueError(f"--shape soak: HOURS must be above 0, got {hours:g}")
    return [Stretch(users_, hours * 3600)]


def merged(stretches: list[Stretch]) -> list[Stretch]:
    """Neighbours at the same users as one stretch; empty ones left out."""
    out: list[Stretch] = []
    for stretch in stretches:
        if stretch.seconds <= 0:
            continue
        if out and out[-1].users == stretch.users:
            out[-1] = Stretch(stretch.users, out[-1].seconds + stretch.seconds)
        else:
            out.append(stretch)
    return out


def parse_shape(text: str) -> tuple[str, list[float | str]]:
    """``"spike:4,16,10,20,45"`` -> ("spike", [4, 16, 10, 20, 45]); a diurnal table stays text; ValueError naming the
    grammar for anything else."""
    kind, _, rest = str(text).strip().partition(":")
    if kind == WORKING_SET:  # levels over contexts, not users (vllm_stress.scenarios.shapes.sweep)
        return kind, [float(contexts) for contexts in sweep_contexts(text) or []]
    parts = [part.strip() for part in rest.split(",") if part.strip()]
    counts = {STEPS: (0, 0), "spike": (5, 5), "diurnal": (2, 4), "trace": (1, 1), SOAK: (1, 2)}
    if kind not in counts or not counts[kind][0] <= len(parts) <= counts[kind][1]:
        raise ValueError(f"--shape must be {GRAMMAR}, got {text!r}")
    try:
        values: list[float | str] = [table(part) if "/" in part else float(part) for part in parts]
    except ValueError:
        raise ValueError(f"--shape {text!r}: numbers expected ({GRAMMAR})") from None
    if any(isinstance(v, float) and v < 0 for v in values):
        raise ValueError(f"--shape {text!r}: no negative numbers")
    return kind, values


def table(text: str) -> str:
    """A diurnal table ``"2/4/8"`` as it is; ValueError when a part is not a number."""
    for part in text.split("/"):
        float(part)
    return text


def stretches_of(text: str, trace: list[TraceLine] | None = None, last_level: int = 1) -> list[Stretch] | None:
    """The stretches --shape names (None for the step ramp and a working-set sweep); ``trace``: --trace's selected
    lines, for trace:WINDOW_S; ``last_level``: the last of --levels, a soak's users when it names none."""
    kind, values = parse_shape(text)
    numbers = [v for v in values if isinstance(v, float)]
    if kind in (STEPS, WORKING_SET):
        return None
    if kind == "spike":
        base, peak = (users(v) for v in numbers[:2])
        return spike(base, peak, *numbers[2:])
    if kind == "trace":
        return trace_rate(trace or [], numbers[0])
    if kind == SOAK:
        return soak(numbers[0], users(numbers[1]) if len(numbers) > 1 else last_level)
    if len(values) == 2 and isinstance(values[1], str):
        return diurnal(numbers[0], [users(float(part)) for part in values[1].split("/")])
    if len(numbers) != len(values) or len(numbers) < 3:
        raise ValueError(f"--shape must be {GRAMMAR}, got {text!r}")
    steps = int(numbers[3]) if len(numbers) > 3 else DIURNAL_STEPS
    return diurnal(numbers[0], sinusoid(users(numbers[1]), users(numbers[2]), max(steps, 1)))


def users(value: float) -> int:
    if value < 1 or not float(value).is_integer():
        raise ValueError(f"--shape: user counts are whole numbers, at least 1, got {value:g}")
    return int(value)


def total_s(stretches: list[Stretch]) -> float:
    return sum(stretch.seconds for stretch in stretches)
