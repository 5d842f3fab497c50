"""The one grammar of every ``--slo`` option (``vllm-stress run``, ``search`` and ``analyse``)::

    NAME[_pNN]=LIMIT[,NAME[_pNN]=LIMIT...]

NAME is a latency metric (``ttft``, ``tpot``, ``itl``, ``e2e``; each command's help names the ones it takes) or
``success``. A latency LIMIT is in milliseconds: a bare number (as in ``vllm bench serve --goodput``) or ``ms``; ``s``
for seconds. ``success`` is a share of requests: ``99.9%`` or ``0.999``.

A bare metric (``ttft=2s``) limits each request: the report's goodput counts the requests within every limit. Where a
level is judged (the SLO search), a bare metric means that level's p99 (``ttft=2s`` is ``ttft_p99=2s``) and ``_pNN``
names another percentile. The per-request reading of ``ttft_p99=2s`` is ``ttft=2s``: every command takes both forms.

Examples: ``ttft=2s,tpot=50``; ``ttft_p99=2000,tpot_p90=50ms,success=99.9%``.

``--stop-on`` (the step ramp's early stop, docs/guides/stress.md) reads the same items with ``>`` for ``=``:
``NAME[_pNN]>LIMIT`` judges a level's percentile as above, ``errors>SHARE`` its failed share (``5%`` or ``0.05``), and
the bare keyword ``saturated`` the server's queue growing through the level's hold (vllm_stress.core.stopon)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from vllm_stress.core.numbers import percent
from vllm_stress.core.numbers import seconds as seconds_text

LIMIT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|%)?\s*$")
PERCENTILE_NAME = re.compile(r"^(\w+?)_p(\d+)$")
SUCCESS = "success"
SUCCESS_FIELD = "success_rate"
ERRORS = "errors"  # --stop-on: the level's failed share, its failures / requests (1 - success_rate)
FAILURES = "failures"  # the level field errors reads, over its "requests" (successes and failures)
SATURATED = "saturated"  # --stop-on: the server's queue grew through the level's hold
STOP_ON = "--stop-on"
JUDGED_PERCENTILE = 99  # the percentile a bare metric means where a level is judged
HELP = (
    "NAME[_pNN]=LIMIT,...: a limit in ms (a bare number) or s, success in %%; a bare NAME limits each request and, "
    "where a level is judged, its p99 (docs/reference/commands.md, the --slo grammar)"
)


@dataclass(frozen=True)
class Slo:
    name: str  # a request's metric (ttft), a level's percentile (ttft_p99) or success
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


@dataclass(frozen=True)
class StopRule:
    """A --stop-on rule: the level's ``field`` above ``limit`` trips it (``errors``: field ``failures``, over the
    level's ``requests`` a share; a percentile: its field in seconds); ``saturated``: no field, the server's queue
    decides (vllm_stress.core.stopon)."""

    name: str  # ttft_p99, errors or saturated
    field: str  # the level field it reads (ttft_p99_s, failures), "" for saturated
    limit: float  # seconds, or a share from 0 to 1 for errors
    column: str = ""  # a percentile rule's request column (ttft_s), of whose measured rows the level's percentile
    percentile: int = JUDGED_PERCENTILE

    def value(self, level: Mapping[str, float]) -> float:
        """What the rule compares in ``level`` ({field: value}): failures / requests for errors; NaN when unknown."""
        if self.field == FAILURES:
            requests = level.get("requests", 0)
            return level.get(FAILURES, math.nan) / requests if requests else math.nan
        return level.get(self.field, math.nan)

    def reason(self, level: Mapping[str, float]) -> str:
        """Why ``level`` trips the rule ("errors 7.2 % > 5.0 %", in vllm_stress.core.numbers' formats), or "" when it
        does not (an unknown value never does)."""
        value = self.value(level)
        if math.isnan(value) or value <= self.limit:
            return ""
        said = percent if self.field == FAILURES else seconds_text
        return f"{self.name} {said(value)} > {said(self.limit)}"


def parse_items(text: str, option: str = "--slo", sign: str = "=") -> list[tuple[str, float, str | None]]:
    """'ttft=2s,tpot=50' -> [("ttft", 2.0, "s"), ("tpot", 50.0, None)]; a ValueError naming a malformed item.
    ``sign``: what joins a name and its limit (``>`` for --stop-on)."""
    items = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, limit = item.partition(sign)
        match = LIMIT.match(limit)
        if not name.strip() or not match:
            raise ValueError(
                f"{option}: {item!r} is not NAME{sign}LIMIT (e.g. ttft{sign}2s, ttft_p99{sign}2000ms, "
                + (f"errors{sign}5%)" if sign == ">" else f"success{sign}99.9%)")
            )
        items.append((name.strip(), float(match[1]), match[2]))
    if not items:
        raise ValueError(f"{option}: give at least one, e.g. ttft{sign}2000ms")
    return items


def share(value: float, unit: str | None) -> float:
    """A share limit from 0 to 1: ``99.9%``, ``99.9`` (above 1: percent) or ``0.999``."""
    return value / 100 if unit == "%" or value > 1 else value


def seconds(value: float, unit: str | None) -> float:
    """A latency limit in seconds: ``s`` as it is, ``ms`` or a bare number as milliseconds."""
    return value if unit == "s" else value / 1000


def split_name(name: str) -> tuple[str, int | None]:
    """'ttft_p99' -> ("ttft", 99); 'ttft' -> ("ttft", None)."""
    match = PERCENTILE_NAME.match(name)
    return (match[1], int(match[2])) if match else (name, None)


def judged(name: str, unit: str | None, metrics: Iterable[str], percentiles: Iterable[int]) -> tuple[str, int] | None:
    """The metric and percentile a latency limit judges, ("ttft", 90) for ``ttft_p90`` (a bare ``ttft`` is its p99),
    when both are allowed and the limit is a time; None otherwise. Its level field is ``ttft_p90``."""
    metric, percentile = split_name(name)
    percentile = JUDGED_PERCENTILE if percentile is None else percentile
    return (metric, percentile) if metric in metrics and percentile in percentiles and unit != "%" else None


def percentile_field(metric: str, percentile: int) -> str:
    """The level field of a metric's percentile: ``ttft_p90``."""
    return f"{metric}_p{percentile}"


def known_names(metrics: Iterable[str], percentiles: Iterable[int]) -> str:
    """The latency names a limit may use, for a one-line error."""
    return f"{', '.join(metrics)}, each with an optional _p{' or _p'.join(map(str, percentiles))}"


def request_slos(text: str, columns: Mapping[str, str]) -> list[Slo]:
    """Per-request latency limits (goodput), one per metric; ``columns`` maps the metrics allowed to the request
    column they limit. ``ttft_p99=2s`` reads as ``ttft=2s`` (a percentile says how a level is judged)."""
    slos: dict[str, Slo] = {}
    for name, value, unit in parse_items(text):
        metric, _ = split_name(name)
        if metric not in columns or unit == "%":
            raise ValueError(
                f"--slo: {name}={value:g}{unit or ''} is not a per-request latency limit "
                f"(use {', '.join(columns)}, each with an optional _pNN)"
            )
        if metric in slos:
            raise ValueError(f"--slo: {metric} is limited twice")
        slos[metric] = Slo(metric, columns[metric], seconds(value, unit))
    return list(slos.values())


def level_slos(text: str, metrics: Iterable[str], percentiles: Iterable[int]) -> list[Slo]:
    """Limits on a level's percentiles (``ttft_p99``: field ``ttft_p99_s``; a bare ``ttft`` is its p99) or its success
    rate (``success``: 99.9 %, 99.9 or 0.999)."""
    metrics, percentiles = tuple(metrics), tuple(percentiles)
    slos = []
    for name, value, unit in parse_items(text):
        if name == SUCCESS:
            slos.append(Slo(SUCCESS, SUCCESS_FIELD, share(value, unit)))
        elif parts := judged(name, unit, metrics, percentiles):
            field = percentile_field(*parts)
            slos.append(Slo(field, f"{field}_s", seconds(value, unit)))
        else:
            raise ValueError(f"--slo: unknown {name!r} (use {known_names(metrics, percentiles)}, or {SUCCESS})")
    return slos


def stop_rules(text: str, columns: Mapping[str, str], percentiles: Iterable[int]) -> list[StopRule]:
    """--stop-on: ``ttft_p99>30s`` (a bare ``ttft`` is its p99), ``errors>5%`` and ``saturated``, comma-separated,
    in their order; ``columns`` maps the latency metrics allowed to their request column. A one-line ValueError for
    anything else."""
    percentiles = tuple(percentiles)
    rules = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item == SATURATED:
            rules.append(StopRule(SATURATED, "", math.nan))
            continue
        ((name, value, unit),) = parse_items(item, STOP_ON, ">")
        if name == ERRORS:
            rules.append(StopRule(ERRORS, FAILURES, share(value, unit)))
        elif parts := judged(name, unit, columns, percentiles):
            metric, percentile = parts
            field = percentile_field(metric, percentile)
            rules.append(StopRule(field, f"{field}_s", seconds(value, unit), columns[metric], percentile))
        else:
            known = known_names(columns, percentiles)
            raise ValueError(f"{STOP_ON}: {item} is not a rule (use {known}, {ERRORS} or {SATURATED})")
    if not rules:
        raise ValueError(f"{STOP_ON}: give at least one rule, e.g. errors>5%")
    return rules
