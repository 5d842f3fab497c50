"""``python -m simulator calibrate``: fit the simulator's step-time constants to a measured sweep, so that the
simulator becomes a twin of the measured deployment (docs/concepts/twin.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from vllm_stress.analysis.io.load import AnalysisError, load_run
from vllm_stress.analysis.report.pipeline import windows_and_stats
from vllm_stress.simulator.cli import VLLM_FLAGS
from vllm_stress.simulator.cli import build_parser as simulator_parser
from vllm_stress.simulator.engine.virtual import closed_loop
from vllm_stress.simulator.model.profiles import DEFAULT_PROFILE, FIELD_TYPES, Profile, load_profile

# the engine's own step-time fields (steptime.py) and the API server's time per request (engine/core.py), nothing else,
# each with the value a fit starts from when the base profile's is 0 (the fit works on logarithms)
FITTED = {"t_fixed": 1e-4, "t_per_seq": 1e-5, "mfu": 0.01, "bw_eff": 0.01, "t_frontend": 1e-4}
METRICS = ("output_tokens_per_s", "ttft_p50_s", "tpot_p50_s")  # what the fit matches, per steady level
# weight of a pull towards the base profile's nonzero constants, per unit of log: small enough to leave the data in
# charge, it only settles the directions the data leaves free (t_fixed against bw_eff when every step reads the same
# weights)
PRIOR_WEIGHT = 0.02
SMALLEST_RATIO = 1e-6  # predicted / measured below it (a prediction of nothing) weighs as this: a finite miss
REQUESTS_PER_USER = 8  # virtual requests per user and level: a few lifetimes after the first wave


class CalibrationError(Exception):
    """A run the fit cannot use: the message is one line naming it and why."""


@dataclasses.dataclass(frozen=True)
class Level:
    """One steady level of a measured run: its load and what the client measured."""

    source: str
    users: int
    engine: dict[str, object]  # profile fields the server was launched with (max_num_seqs, blocks ...)
    prompt_tokens: int
    output_tokens: int
    measured: dict[str, float]  # METRICS -> value


def launch_settings(meta: dict) -> dict[str, object]:
    """Profile fields the run's server was started with: vLLM's flags from run.json's server_launch command, the KV
    cache from server_cache_config."""
    command = (meta.get("server_launch") or {}).get("command") or []
    args, _ = simulator_parser().parse_known_args([str(arg) for arg in command])
    settings: dict[str, object] = {flag: getattr(args, flag) for flag in VLLM_FLAGS if getattr(args, flag) is not None}
    settings.pop("served_model_name", None)
    cache = meta.get("server_cache_config") or {}
    if cache.get("block_size"):
        settings["block_size"] = int(cache["block_size"])
    if cache.get("num_gpu_blocks"):
        settings["num_gpu_blocks_override"] = int(cache["num_gpu_blocks"])
    return settings


def measured_levels(folder: str) -> list[Level]:
    """The steady levels of one run folder, or CalibrationError saying in one line why it cannot be fitted."""
    try:
        run = load_run(folder, canaries_in_figures=False)  # the twin is fitted to the load's own shape: canaries differ
    except AnalysisError as error:
        raise CalibrationError(str(error)) from None
    rows = run.requests[run.requests["ok"] == 1]
    if rows.empty or rows["completion_tokens"].isna().all() or rows["prompt_tokens"].isna().all():
        raise CalibrationError(f"{folder}: no token counts in requests.csv (the server sent no usage)")
    server = run.tables.get("server")
    if server is None or server["running"].isna().all():
        raise CalibrationError(f"{folder}: no server metrics (server_metrics.csv is empty: no vLLM /metrics)")
    try:
        _, stats, _, _ = windows_and_stats(run)  # the report's own levels: the twin's figures are the report's
    except AnalysisError as error:
        raise CalibrationError(str(error)) from None
    steady = stats[stats["steady"].astype(bool) & stats[list(METRICS)].notna().all(axis=1)]
    if steady.empty:
        raise CalibrationError(f"{folder}: no steady level (hold each level longer: docs/concepts/steady-state.md)")
    engine = launch_settings(run.meta)
    levels = []
    for level in steady.itertuples():
        sizes = rows[rows["users"] == level.users]
        levels.append(
            Level(
                source=folder,
                users=int(str(level.users)),
                engine=engine,
                prompt_tokens=round(sizes["prompt_tokens"].median()),
                output_tokens=round(sizes["completion_tokens"].median()),
                measured={metric: float(getattr(level, metric)) for metric in METRICS},
            )
        )
    return levels


def predict(profile: Profile, level: Level) -> dict[str, float]:
    """What the engine model (virtual time, no jitter) gives for the level's load: METRICS -> value."""
    result = closed_loop(
        profile.replace(jitter=0.0, **level.engine),
        level.users,
        level.prompt_tokens,
        level.output_tokens,
        requests=REQUESTS_PER_USER * level.users,
    )
    return {
        "output_tokens_per_s": result.output_tokens_per_s,
        "ttft_p50_s": result.ttft_p50,
        "tpot_p50_s": result.tpot_p50,
    }


def relative_errors(profile: Profile, levels: list[Level]) -> list[dict[str, float]]:
    """Per level: METRICS -> (predicted - measured) / measured."""
    errors = []
    for level in levels:
        predicted = predict(profile, level)
        errors.append({m: predicted[m] / level.measured[m] - 1.0 for m in METRICS})
    return errors


def with_fitted(base: Profile, log_values: np.ndarray) -> Profile:
    return base.replace(**{name: float(math.exp(value)) for name, value in zip(FITTED, log_values, strict=True)})


def fit(base: Profile, levels: list[Level]) -> Profile:
    """``base`` with FITTED chosen by least squares on the log ratios predicted / measured of every METRIC of every
    level (so that a 10 % miss weighs the same on any metric and scale), with a weak pull towards ``base``."""

    def residuals(log_values: np.ndarray) -> np.ndarray:
        profile = with_fitted(base, log_values)
        misses = [
            math.log(max(1 + e, SMALLEST_RATIO)) for errors in relative_errors(profile, levels) for e in errors.values()
        ]
        return np.concatenate([misses, prior * (log_values - start)])

    start = np.log([getattr(base, name) or floor for name, floor in FITTED.items()])
    prior = np.array([PRIOR_WEIGHT if getattr(base, name) else 0.0 for name in FITTED])
    solution = least_squares(residuals, start, diff_step=[1e-3] * len(FITTED), max_nfev=300)
    return with_fitted(base, solution.x)


def error_summary(errors: list[dict[str, float]]) -> dict[str, float]:
    """METRICS -> median absolute relative error over the levels."""
    return {m: float(np.median([abs(e[m]) for e in errors])) for m in METRICS}


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    return repr(value)


def profile_toml(profile: Profile) -> str:
    """The profile as a flat TOML file that load_profile reads back (every field, the twin's last)."""
    lines = [f"# a twin calibrated by `python -m simulator calibrate` from {profile.twin_source}"]
    lines += [f"{name} = {toml_value(getattr(profile, name))}" for name in FIELD_TYPES if name != "name"]
    return "\n".join(lines) + "\n"


def level_lines(levels: list[Level], errors: list[dict[str, float]]) -> list[str]:
    lines = [f"{'run':<40} {'users':>5} " + " ".join(f"{m:>22}" for m in METRICS)]
    for level, error in zip(levels, errors, strict=True):
        cells = [f"{level.measured[m]:>12.4g} {error[m]:>+8.1%}" for m in METRICS]
        lines.append(f"{level.source[-40:]:<40} {level.users:>5} " + " ".join(cells))
    return lines


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Fit the simulator's step-time constants (t_fixed, t_per_seq, mfu, bw_eff) and the API server's "
        "time per request (t_frontend) to the steady levels of measured runs, and write a profile that makes the "
        "simulator a twin of that server.",
    )
    parser.add_argument("--from-run", nargs="+", required=True, metavar="DIR", help="run folders of the sweep")
    parser.add_argument("--out", required=True, metavar="PROFILE.toml", help="the calibrated profile to write")
    parser.add_argument(
        "--base", default=DEFAULT_PROFILE, help="profile whose model and hardware shape the twin keeps (%(default)s)"
    )
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m simulator calibrate") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        base = load_profile(args.base)
        levels = [level for folder in args.from_run for level in measured_levels(folder)]
    except CalibrationError as error:
        print(f"calibrate: cannot fit {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # an unknown or bad --base
        print(f"calibrate: {error}", file=sys.stderr)
        return 2
    # the twin starts as the first run's server was launched (its engine flags and KV blocks); what-ifs override them
    twin = fit(base, levels).replace(**levels[0].engine)
    errors = relative_errors(twin, levels)
    summary = error_summary(errors)
    error_text = ", ".join(f"{m} {value:.1%}" for m, value in summary.items())
    sources = " ".join(args.from_run)
    twin = twin.replace(
        description=f"twin of the server measured in {sources}",
        twin_source=sources,
        twin_error=f"median |error| on its runs: {error_text}",
    )
    Path(args.out).write_text(profile_toml(twin))
    print("\n".join(level_lines(levels, errors)))
    print(" ".join(f"{name}={getattr(twin, name):.4g}" for name in FITTED))
    print(f"{args.out}: {twin.twin_error}")
    return 0
