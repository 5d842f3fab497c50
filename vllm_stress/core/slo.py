"""The grammar of every ``--slo`` option: ``NAME=LIMIT[,NAME=LIMIT...]``, a limit in ``ms`` (a bare number, as in
``vllm bench serve --goodput``), ``s``, or ``%`` (a success rate). Per-request SLOs (goodput) name a metric
(``ttft=2s``); level SLOs (the SLO search) name a percentile of one (``ttft_p99=2000``) or ``success``."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

LIMIT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|%)?\s*$")
PERCENTILE_NAME = re.compile(r"^(\w+)_p(\d+)$")
SUCCESS = "success"
SUCCESS_FIELD = "success_rate"


@dataclass(frozen=True)
class Slo:
    name: str  # as given: ttft, ttft_p99, success
    field: str  # what it limits: a request column (ttft_s) or a level field (ttft_p99_s, success_rate)
    limit: float  # seconds, or a share from 0 to 1 for success

    def met(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return value >= self.limit if self.field == SUCCESS_FIELD else value <= self.limit

    def excess(self, value: float) -> float:
        """How far ``value`` is from the limit, as a ratio (1 at the limit, above 1 when it misses)."""
        if self.field == SUCCESS_FIELD:
            return (1 - value) / (1 - self.limit) if self.limit < 1 else (math.inf if value < 1 else 1.0)
        return value / self.limit if self.limit else math.inf

    def describe(self) -> str:
        if self.field == SUCCESS_FIELD:
            return f"{self.name} ≥ {self.limit:.2%}"
        return f"{self.name} ≤ {self.limit * 1000:g} ms"


def parse_items(text: str) -> list[tuple[str, float, str | None]]:
    """'ttft=2s,tpot=50' -> [("ttft", 2.0, "s"), ("tpot", 50.0, None)]; a ValueError naming a malformed item."""
    items = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, limit = item.partition("=")
        match = LIMIT.match(limit)
        if not name.strip() or not match:
            raise ValueError(f"--slo: {item!r} is not NAME=LIMIT (e.g. ttft=2s, ttft_p99=2000ms, success=99.9%)")
        items.append((name.strip(), float(match[1]), match[2]))
    if not items:
        raise ValueError("--slo: give at least one, e.g. ttft=2000ms")
    return items


def seconds(value: float, unit: str | None) -> float:
    """A latency limit in seconds: ``s`` as it is, ``ms`` or a bare number as milliseconds."""
    return value if unit == "s" else value / 1000


def request_slos(text: str, columns: Mapping[str, str]) -> list[Slo]:
    """Per-request latency limits (goodput); ``columns`` maps the names allowed to the request column they limit."""
    slos = []
    for name, value, unit in parse_items(text):
        if name not in columns or unit == "%":
            raise ValueError(f"--slo: {name}={value:g}{unit or ''} is not a latency limit (use {', '.join(columns)})")
        slos.append(Slo(name, columns[name], seconds(value, unit)))
    return slos


def level_slos(text: str, metrics: Iterable[str], percentiles: Iterable[int]) -> list[Slo]:
    """Limits on a level's percentiles (``ttft_p99``: field ``ttft_p99_s``) or its success rate (``success``: 99.9 %,
    99.9 or 0.999)."""
    metrics, percentiles = tuple(metrics), tuple(percentiles)
    slos = []
    for name, value, unit in parse_items(text):
        latency = PERCENTILE_NAME.match(name)
        if name == SUCCESS:
            slos.append(Slo(SUCCESS, SUCCESS_FIELD, value / 100 if unit == "%" or value > 1 else value))
        elif latency and latency[1] in metrics and int(latency[2]) in percentiles and unit != "%":
            slos.append(Slo(name, f"{name}_s", seconds(value, unit)))
        else:
            known = ", ".join(f"{m}_p{p}" for m in metrics for p in percentiles)
            raise ValueError(f"--slo: unknown {name!r} (use {known} or {SUCCESS})")
    return slos
