"""A scenario's settings: its Locust config file, the matrix of server settings it runs in, and the ramp options a
command line overrides."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from vllm_stress.core.slo import request_slos
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.shapes.levels import RAMP_DEFAULTS, RAMP_TIMES, RUN_KEYS, check_times, parse_levels
from vllm_stress.scenarios.shapes.stretches import STEPS, parse_shape

PACKAGE = Path(__file__).resolve().parents[2]
# Where relative paths of a scenario (its config's dataset, a --server-cmd) are read from: the checkout's root, or
# the installed package, which carries scenarios/configs and scenarios/data too.
ROOT = PACKAGE.parent if (PACKAGE.parent / "scenarios" / "configs").is_dir() else PACKAGE
CONFIGS = PACKAGE / "scenarios" / "configs"
# The keys a command line's Locust arguments override for the runner: the ramp's, its time budget, the run's own.
OVERRIDDEN = (*RAMP_DEFAULTS, "shape", "max-minutes", *RUN_KEYS)


def scenario_names() -> list[str]:
    return sorted(p.stem for p in CONFIGS.glob("*.conf"))


def read_config(name: str) -> tuple[Path, dict[str, str]]:
    """The scenario's Locust config file and its keys (``key = value`` lines)."""
    path = CONFIGS / f"{name}.conf"
    if not path.is_file():
        raise ScenarioError(f"unknown scenario {name!r} (known: {', '.join(scenario_names())})")
    keys = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            keys[key.strip()] = value.strip().strip('"')
    try:
        parse_levels(keys.get("levels", RAMP_DEFAULTS["levels"]))
        check_times({flag: keys[flag] for flag in RAMP_TIMES if flag in keys})
        parse_shape(keys.get("shape", STEPS))
    except ValueError as e:
        raise ScenarioError(f"{path}: {e}") from None
    return path, keys


def header_comment(config: Path) -> list[str]:
    """The comment lines at the top of a scenario's config file: what it runs and why."""
    lines = []
    for line in config.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    return lines


def read_matrix(path: str) -> list[dict[str, str]]:
    """Cells of server settings from a TOML file of ``[[cell]]`` tables (vLLM flag names as keys)."""
    try:
        cells = tomllib.loads(Path(path).read_text())["cell"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as e:
        raise ScenarioError(f"{path}: not a matrix file of [[cell]] tables ({type(e).__name__}: {e})") from None
    return [{str(k): str(v) for k, v in cell.items()} for cell in cells]


def cell_args(cell: dict[str, str]) -> list[str]:
    return [arg for key, value in cell.items() for arg in (f"--{key}", value)]


def cell_name(cell: dict[str, str]) -> str:
    return "_".join(f"{key.replace('max-num-', '')}-{value}" for key, value in cell.items()) or "default"


def with_overrides(keys: dict[str, str], locust_args: list[str]) -> dict[str, str]:
    """The config's keys with the ramp options and the run's keys (OVERRIDDEN) that ``locust_args`` give instead
    (Locust's command line beats its config file), so that the run's time limit follows e.g.
    ``--locust-arg=--step-time=600`` and its repeats ``--repeats 3``."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for key in OVERRIDDEN:
        parser.add_argument(f"--{key}")
    given = vars(parser.parse_known_args(locust_args)[0])
    return keys | {key: given[key.replace("-", "_")] for key in OVERRIDDEN if given[key.replace("-", "_")]}


def report_options(keys: dict[str, str]) -> dict[str, Any]:
    """The analysis's gpus, gpu_hour_price and slo from a scenario's keys (a ScenarioError for a bad one)."""
    from vllm_stress.analysis.measures import LATENCY_METRICS  # here: `vllm-stress locustfile shape` needs no pandas

    try:
        gpus = int(keys["gpus"]) if keys.get("gpus") else None
        price = float(keys["gpu-hour-price"]) if keys.get("gpu-hour-price") else None
        slo = {s.name: s.limit for s in request_slos(keys["slo"], LATENCY_METRICS)} if keys.get("slo") else None
    except ValueError as error:
        raise ScenarioError(f"gpus, gpu-hour-price or slo: {error}") from None
    if (gpus is not None and gpus < 1) or (price is not None and not price > 0):
        raise ScenarioError("--gpus must be at least 1 and --gpu-hour-price more than 0")
    return {"gpus": gpus, "gpu_hour_price": price, "slo": slo}
