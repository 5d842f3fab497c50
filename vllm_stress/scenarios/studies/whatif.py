"""``python -m scenarios whatif``: run a matrix of changed server settings and workloads against a calibrated twin
(``python -m simulator calibrate``) and put each cell's figures beside the measured baseline's, in one table
(docs/guides/twin.md, section 4)."""

from __future__ import annotations

import argparse
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_stress.analysis.features.traces import DEFAULT_WINDOW_S
from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.report.pipeline import summarise_runs
from vllm_stress.analysis.report.render import Paragraph, Table, to_markdown
from vllm_stress.client.features.profile import DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS
from vllm_stress.core.numbers import count, milliseconds, percent, seconds
from vllm_stress.scenarios.run.config import cell_name, read_config, with_overrides
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.folders import prepare_out
from vllm_stress.scenarios.run.runner import run_scenario
from vllm_stress.scenarios.shapes.levels import RAMP_DEFAULTS, check_times, longest_run_s, parse_levels, step_seconds
from vllm_stress.simulator.cli import VLLM_FLAGS
from vllm_stress.simulator.model.profiles import load_profile

log = logging.getLogger("scenarios")

# the simulator's vLLM flags a cell may change (its matrix keys); the prefix-caching switch and the served name are
# no capacity question
SERVER_SETTINGS = tuple(
    flag.replace("_", "-")
    for flag in VLLM_FLAGS
    if flag not in ("served_model_name", "enable_prefix_caching", "stream_interval")
)
FRACTION_SETTINGS = ("gpu-memory-utilization", "prefix-share")  # 0 <= value <= 1; the others are whole numbers >= 1
# what a cell may change of the load: the client's own options, and the share of each prompt that is a prefix shared
# by every request (--prefix-tokens = share x input tokens)
WORKLOAD_SETTINGS = ("input-tokens", "output-tokens", "prefix-share")
MAX_CELLS = 16  # a what-if matrix is a handful of questions, each a full ramp on the twin
DEFAULT_MAX_MINUTES = 60.0
RUN_OVERHEAD_S = 15.0  # a run's Locust processes starting and stopping, and its report
METRICS = {  # level field -> (table heading, how its value is written)
    "output_tokens_per_s": ("output tok/s", count),
    "ttft_p50_s": ("TTFT p50", milliseconds),
    "tpot_p50_s": ("TPOT p50", milliseconds),
    "e2e_p99_s": ("e2e p99", seconds),
}
CSV_FILE, MD_FILE = "whatif.csv", "whatif.md"
BASELINE = "baseline (measured)"


@dataclass(frozen=True)
class Cell:
    """One question: the server settings and the workload it changes (flag name -> value as given)."""

    server: dict[str, str]
    workload: dict[str, str]

    @property
    def name(self) -> str:
        return " ".join(f"{key}={value}" for key, value in {**self.server, **self.workload}.items())


def parse_vary(texts: list[str]) -> dict[str, list[str]]:
    """``["max-num-seqs=4,16", "input-tokens=1024"]`` -> ``{"max-num-seqs": ["4", "16"], ...}``; a one-line
    ScenarioError for anything else."""
    known = SERVER_SETTINGS + WORKLOAD_SETTINGS
    varied: dict[str, list[str]] = {}
    for text in texts:
        name, equals, values = text.partition("=")
        name = name.strip().removeprefix("--")
        if not equals or not values.strip():
            raise ScenarioError(f"--vary {text!r}: expected NAME=VALUE,VALUE,... (e.g. max-num-seqs=4,16)")
        if name not in known:
            raise ScenarioError(
                f"--vary: unknown setting {name!r} (the twin runs one server; known: {', '.join(known)})"
            )
        if name in varied:
            raise ScenarioError(f"--vary {name} is given twice: put all its values in one list")
        varied[name] = [check_value(name, value.strip()) for value in values.split(",")]
    return varied


def check_value(name: str, value: str) -> str:
    """``value`` when it is one ``name`` can take, else a one-line ScenarioError."""
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if name in FRACTION_SETTINGS:
        if not 0 <= number <= 1:
            raise ScenarioError(f"--vary {name}: {value!r} is not a share from 0 to 1")
    elif not (value.isdigit() and int(value) >= 1):
        raise ScenarioError(f"--vary {name}: {value!r} is not a whole number of at least 1")
    return value


def matrix_cells(varied: dict[str, list[str]]) -> list[Cell]:
    """Every combination of the varied values, the server's settings apart from the workload's."""
    names = list(varied)
    cells = []
    for values in itertools.product(*varied.values()):
        setting = dict(zip(names, values, strict=True))
        cells.append(
            Cell(
                {k: v for k, v in setting.items() if k in SERVER_SETTINGS},
                {k: v for k, v in setting.items() if k in WORKLOAD_SETTINGS},
            )
        )
    if len(cells) > MAX_CELLS:
        raise ScenarioError(f"--vary: {len(cells)} cells, at most {MAX_CELLS}: ask fewer questions at once")
    return cells


def workload_args(workload: dict[str, str], input_tokens: int, output_tokens: int) -> list[str]:
    """The Locust options of a cell's workload (the baseline's, with what the cell changes)."""
    prompt = int(workload.get("input-tokens", input_tokens))
    args = [f"--input-tokens={prompt}", f"--output-tokens={workload.get('output-tokens', output_tokens)}"]
    share = float(workload.get("prefix-share", 0))
    if share:
        prefix = round(share * prompt)
        if prefix >= prompt:
            raise ScenarioError(f"--vary prefix-share={share:g}: the shared prefix must be shorter than the prompt")
        args.append(f"--prefix-tokens={prefix}")
    return args


def baseline_summary(folder: str) -> dict[str, Any]:
    """The measured baseline as the report summarises it: its levels, saturation point and run.json's keys."""
    run = load_run(folder)
    config, _, _ = summarise_runs(BASELINE, [run], None, None, {}, DEFAULT_WINDOW_S)
    return {**config, "meta": run.meta}


def twin_line(profile_path: str, baseline: str) -> str:
    """The table's first line: predicted, not measured; the twin's source and error; the baseline's folder."""
    profile = load_profile(profile_path)
    if not profile.twin_source:
        raise ScenarioError(
            f"--profile {profile_path}: not a calibrated twin (write one with python -m simulator calibrate)"
        )
    return (
        f"**Twin — predicted, not measured:** every cell but the baseline was served by a twin calibrated on "
        f"{profile.twin_source} ({profile.twin_error}); the baseline was measured in {baseline}."
    )


def level_rows(label: str, config: dict[str, Any], baseline: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per level of a config: its figures, its saturation point, and each figure's change vs the
    baseline's at the same users (empty when the baseline has no such level)."""
    rows = []
    for level in config["levels"]:
        row: dict[str, Any] = {"cell": label, "users": int(level["users"]), "steady": bool(level["steady"])}
        row |= {field: level.get(field) for field in METRICS}
        row["saturation_users"] = config["saturation_users"]
        measured = baseline.get(row["users"])
        for field in METRICS:
            base, value = (measured or {}).get(field), row[field]
            row[f"{field}_vs_baseline"] = value / base - 1 if base and value is not None else None
        rows.append(row)
    return rows


def markdown(first_line: str, table: pd.DataFrame) -> str:
    headers = ["cell", "users", *(f"{heading} (vs baseline)" for heading, _ in METRICS.values()), "saturation users"]
    rows = []
    for row in table.to_dict("records"):
        cells = [
            f"{text(row[field])} ({percent(row[f'{field}_vs_baseline'], signed=True)})"
            for field, (_, text) in METRICS.items()
        ]
        users = f"{row['users']}" + ("" if row["steady"] else " (not steady)")
        rows.append([str(row["cell"]), users, *cells, count(row["saturation_users"])])
    return to_markdown([Paragraph(first_line), Table(headers, rows)]) + "\n"


def whatif(args: argparse.Namespace) -> tuple[Path, pd.DataFrame]:
    """Run every cell against the twin, write whatif.md and whatif.csv into --out; returns the folder and the
    table."""
    first_line = twin_line(args.profile, args.baseline)
    cells = matrix_cells(parse_vary(args.vary))
    baseline = baseline_summary(args.baseline)
    meta = baseline["meta"]
    scenario = args.scenario or meta.get("scenario")
    if not scenario:
        raise ScenarioError(f"--scenario: {args.baseline}'s run.json names no scenario; give the one to run")
    _, keys = read_config(scenario)
    levels = args.levels or ",".join(str(level["users"]) for level in baseline["levels"])
    parse_levels(levels)
    if args.step_time:
        check_times({"step-time": args.step_time})
    ramp = [f"--levels={levels}", *([f"--step-time={args.step_time}"] if args.step_time else [])]
    expected_s = len(cells) * expected_run_s(with_overrides(keys, ramp))
    if expected_s > args.max_minutes * 60:
        raise ScenarioError(
            f"{len(cells)} cells of levels {levels} take about {expected_s / 60:.0f} min, over --max-minutes "
            f"{args.max_minutes:g}: fewer cells or levels, or a shorter --step-time"
        )
    bound_s = longest_run_s(with_overrides(keys, ramp))
    out = Path(args.out or f"results/whatif-{scenario}").resolve()
    prepare_out(out, args.overwrite)
    tokens = (
        int(meta.get("input_tokens") or keys.get("input-tokens") or DEFAULT_INPUT_TOKENS),
        int(meta.get("output_tokens") or keys.get("output-tokens") or DEFAULT_OUTPUT_TOKENS),
    )
    by_users = {int(level["users"]): level for level in baseline["levels"]}
    rows = level_rows(BASELINE, baseline, {})
    for index, cell in enumerate(cells, 1):
        log.info(
            "whatif: cell %d of %d: %s (about %.0f s; stopped after %.0f s at most)",
            index,
            len(cells),
            cell.name,
            expected_s / len(cells),
            bound_s,
        )
        summary = run_scenario(
            scenario,
            out / f"cell-{index}",
            workers=args.workers or None,
            repeats=1,
            simulator_args=[f"--profile={Path(args.profile).resolve()}"],
            locust_args=[*ramp, *workload_args(cell.workload, *tokens)],
            matrix=str(write_matrix(out / f"cell-{index}.toml", cell.server)),
        )
        config = summary["configs"][cell_name(cell.server)]
        rows += level_rows(cell.name, dict(config), by_users)
        log.info(
            "whatif: cell %d: saturation at %s users, peak %s",
            index,
            config["saturation_users"],
            count((config["peak"] or {}).get("output_tokens_per_s")),
        )
    table = pd.DataFrame(rows)
    table.to_csv(out / CSV_FILE, index=False)
    (out / MD_FILE).write_text(markdown(first_line, table))
    return out, table


def expected_run_s(keys: dict[str, str]) -> float:
    """About how long one cell's run takes: each level's ramp, warm-up and hold (an ``auto`` hold at its bound), and
    the processes' start and the analysis (RUN_OVERHEAD_S)."""
    value = {key: keys.get(key, default) for key, default in RAMP_DEFAULTS.items()}
    hold = step_seconds(value["step-time"])
    per_level = (
        float(value["ramp-time"]) + float(value["warmup"]) + (float(value["max-step-time"]) if hold is None else hold)
    )
    return len(parse_levels(value["levels"])) * per_level + RUN_OVERHEAD_S


def write_matrix(path: Path, server: dict[str, str]) -> Path:
    """A one-cell matrix file of the cell's server settings (the runner's --matrix format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[[cell]]\n" + "".join(f"{key} = {value}\n" for key, value in server.items()))
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", required=True, metavar="PROFILE.toml", help="the twin (simulator calibrate)")
    parser.add_argument("--baseline", required=True, metavar="RUN_DIR", help="the measured run to compare against")
    parser.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help=f"a setting and its values (repeatable; the cells are every combination). Server: "
        f"{', '.join(SERVER_SETTINGS)}; workload: {', '.join(WORKLOAD_SETTINGS)} (prefix-share: the share of each "
        "prompt every request shares, 0 to 1)",
    )
    parser.add_argument("--scenario", default="", help="scenario to run (default: the baseline's)")
    parser.add_argument("--levels", default="", help="user levels (default: the baseline's)")
    parser.add_argument("--step-time", default="", help="hold of each level, seconds (default: the scenario's)")
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=DEFAULT_MAX_MINUTES,
        help="refuse a matrix whose runs take longer, about (%(default)g; each run is also stopped at its bound)",
    )
    parser.add_argument("--workers", type=int, default=0, help="Locust worker processes (default: as for run)")
    parser.add_argument("--out", default="", help="output folder (default: results/whatif-<scenario>)")
    parser.add_argument("--overwrite", action="store_true", help="replace the output folder if it exists")


def run_from_args(args: argparse.Namespace) -> str:
    """Run the what-if; the line printed at its end."""
    if not args.vary:
        raise ScenarioError("--vary: give at least one setting to change, e.g. --vary max-num-seqs=4,16")
    out, table = whatif(args)
    return f"{out / MD_FILE}: {table['cell'].nunique() - 1} cells beside {args.baseline}"
