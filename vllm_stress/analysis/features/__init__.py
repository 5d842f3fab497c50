"""The analysis's part of each capability (vllm_stress.core.capabilities), one module per capability named after it:
``level_stats``, ``summarise_config`` and ``build_report`` loop over ``features()`` and name none of them.

A feature module defines what it adds, each part optional:

- ``FIELDS``: {level field: description}, its columns of the per-level rows (in LEVEL_FIELDS, the glossary);
- ``level_fields(level: LevelInput) -> pd.DataFrame``: those columns, indexed by users;
- ``summarise(config: ConfigInput) -> dict``: its keys of a config's summary (summary.json);
- ``bounds(levels) -> pd.Series | None``: the levels' bound verdicts when the capability decides them;
- ``used(config) -> bool``: whether the config's runs used it (the report shows its parts only then);
- ``columns(config) -> list[Column]``: its columns of the report's per-level table;
- ``overview(label, config) -> list[str]``: its sentences in the report's first paragraph;
- ``blocks(label, config, configs) -> list[Block]``: its section of the report, after the per-level table;
- ``figures(configs, out) -> dict[str, Path]``: its plots of the configs that used it, {title: path} (into ``out``).

The modules are found by name (adding a capability adds its module here and a line to the registry) and imported
when levels.py is, for their FIELDS: at import they use only what lies below levels (measures, load, render, core and
their capability's own modules); anything above, such as plotting, is imported inside the hook that draws.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from vllm_stress.analysis.io.load import Run
from vllm_stress.analysis.report.render import Block
from vllm_stress.core.capabilities import CAPABILITIES, Capability

Config = Mapping[str, Any]  # a config's summary (vllm_stress.analysis.summary.ConfigSummary)


@dataclass(frozen=True)
class LevelInput:
    """One run's requests by level, what a feature's per-level fields are computed from."""

    run: Run
    windows: pd.DataFrame  # users, start, end, partial, held (vllm_stress.analysis.levels.level_windows)
    rows: pd.DataFrame  # every request row, with its population flags (levels.classify)
    ended: pd.DataFrame  # those that ended in their level's window
    measured: pd.DataFrame  # of those, the measured ones (successful, on target)
    base: pd.DataFrame  # the base profile's fields of each level (index users)
    replicas: pd.DataFrame | None  # the replicas' level rows behind a router (vllm_stress.analysis.replicas)


@dataclass(frozen=True)
class RunLevels:
    """One run of a config, its level windows and its per-level rows."""

    run: Run
    windows: pd.DataFrame
    stats: pd.DataFrame


@dataclass(frozen=True)
class ConfigInput:
    """A config's runs, what a feature's part of its summary is computed from."""

    label: str
    runs: list[RunLevels]
    gpus: int | None
    gpu_hour_price: float | None
    level_stats: Callable[[Run, pd.DataFrame, dict[str, float] | None], pd.DataFrame]  # levels.level_stats
    window_s: float | None  # the per-window tables' window (analysis --window), None: the traces module's default


@dataclass(frozen=True)
class Column:
    """A column of the report's per-level table: its header and a level's cell."""

    header: str
    cell: Callable[[Mapping[str, Any]], str]


@dataclass(frozen=True)
class Feature:
    """A capability's analysis module, its parts defaulting to nothing."""

    capability: Capability
    module: ModuleType

    @property
    def fields(self) -> dict[str, str]:
        fields: dict[str, str] = getattr(self.module, "FIELDS", {})
        return fields

    def hook(self, name: str) -> Callable[..., Any] | None:
        found: Callable[..., Any] | None = getattr(self.module, name, None)
        return found

    def level_fields(self, level: LevelInput) -> pd.DataFrame | None:
        hook = self.hook("level_fields")
        return None if hook is None else hook(level)

    def summarise(self, config: ConfigInput) -> dict[str, Any]:
        hook = self.hook("summarise")
        return {} if hook is None else dict(hook(config))

    def bounds(self, levels: pd.DataFrame) -> pd.Series | None:
        hook = self.hook("bounds")
        return None if hook is None else hook(levels)

    def used(self, config: Config) -> bool:
        hook = self.hook("used")
        return hook is not None and bool(hook(config))

    def columns(self, config: Config) -> list[Column]:
        hook = self.hook("columns")
        return [] if hook is None or not self.used(config) else list(hook(config))

    def overview(self, label: str, config: Config) -> list[str]:
        hook = self.hook("overview")
        return [] if hook is None or not self.used(config) else list(hook(label, config))

    def blocks(self, label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
        hook = self.hook("blocks")
        return [] if hook is None or not self.used(config) else list(hook(label, config, configs))

    def figures(self, configs: Mapping[str, Config], out: Path) -> dict[str, Path]:
        hook = self.hook("figures")
        using = {label: config for label, config in configs.items() if self.used(config)}
        return {} if hook is None or not using else dict(hook(using, out))


@functools.cache
def features() -> tuple[Feature, ...]:
    """The capabilities that have an analysis module here, in the registry's order."""
    found = []
    for entry in CAPABILITIES:
        name = f"{__name__}.{entry.name}"
        if importlib.util.find_spec(name) is not None:
            found.append(Feature(entry, importlib.import_module(name)))
    return tuple(found)


def level_fields() -> dict[str, str]:
    """Every feature's per-level fields with their descriptions, in the registry's order."""
    return {field: text for feature in features() for field, text in feature.fields.items()}
