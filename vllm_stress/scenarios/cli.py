"""The scenarios' command line: ``python -m scenarios COMMAND`` from the repository root, ``vllm-stress COMMAND``
installed (the same parser, named after the command that runs it)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_stress.analysis.io.load import AnalysisError
from vllm_stress.client.features.profile import DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS
from vllm_stress.core.slo import HELP as SLO_HELP
from vllm_stress.scenarios.run.config import read_config, scenario_names
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.runner import (
    DEFAULT_LOCUSTFILE,
    MAX_DEFAULT_WORKERS,
    REMOTE_WORKER_CONNECT_WAIT_S,
    run_scenario,
)
from vllm_stress.scenarios.run.servers import SERVER_READY_TIMEOUT_S
from vllm_stress.scenarios.run.stopping import exit_code, stop_on_signals
from vllm_stress.scenarios.run.worker import MASTER_PORT
from vllm_stress.scenarios.search.judge import SLO_METRICS, parse_slos
from vllm_stress.scenarios.search.run import search
from vllm_stress.scenarios.search.space import DEFAULT_POOL_SECONDS, OVER, UNITS
from vllm_stress.scenarios.search.writeup import REPORT_FILE
from vllm_stress.scenarios.shapes.levels import RAMP_DEFAULTS, RUN_KEYS, longest_run_s
from vllm_stress.scenarios.shapes.stretches import GRAMMAR
from vllm_stress.scenarios.studies import parallel, plan, routercost, whatif
from vllm_stress.users import LOCUSTFILES

DEFAULT_SCENARIO = "quickstart"
# `run`'s own options: each is the Locust option or the scenario key of the same name (RUN_KEYS, the ramp's, the user
# class's), passed to the run as --locust-arg=--NAME=VALUE would be, after those
RUN_OPTIONS: dict[str, dict[str, Any]] = {
    "model": {"metavar": "NAME", "help": "Model name sent in requests (else the first model the server lists)"},
    "input-tokens": {"type": int, "metavar": "N", "help": "Prompt length in tokens"},
    "output-tokens": {"type": int, "metavar": "N", "help": "Answer length in tokens"},
    "levels": {"metavar": "N,N,...", "help": "Users of the step ramp's levels, e.g. 10,50,100"},
    "shape": {"metavar": "SHAPE", "help": f"The load over time instead of the step ramp: {GRAMMAR}"},
    "repeats": {"type": int, "metavar": "N", "help": RUN_KEYS["repeats"]},
    "max-minutes": {
        "type": float,
        "metavar": "MIN",
        "help": "Time budget from the start to the report: the ETA is shown from the start, the levels and repeats "
        "that no longer fit are cut with the reason, and the report covers what ran (0: none)",
    },
    "api-key-file": {"metavar": "FILE", "help": "File holding the server's API key (never the key on a command line)"},
    "gpus": {"type": int, "metavar": "N", "help": RUN_KEYS["gpus"]},
    "gpu-hour-price": {"type": float, "metavar": "USD", "help": RUN_KEYS["gpu-hour-price"]},
    "slo": {"metavar": "NAME=LIMIT,...", "help": f"Per-request limits for the report's goodput: {SLO_HELP}"},
    "workers": {
        "type": int,
        "metavar": "N",
        "help": f"{RUN_KEYS['workers']}: one per core, at most {MAX_DEFAULT_WORKERS}, unless the scenario says",
    },
}

PROG = "python -m scenarios"
DESCRIPTION = """\
%(prog)s run --scenario NAME [--target URL] [--repeats N] [--out DIR] ...  |  %(prog)s list
|  %(prog)s search --scenario NAME --slo ttft_p99=2000,... [--over users|rate] [--repeats N] [--out DIR]
|  %(prog)s parallel --dataset FILE [--parallel 1,4,16] [--target URL] [--limit N] --out DIR
|  %(prog)s plan --users N --tokens-per-s-per-stream R [--cores-per-machine C] | plan --from-run DIR
|  %(prog)s plan --target-rate 300req/s --from-report DIR [--headroom 0.2] [--gpus N --gpu-hour-price USD]
|  %(prog)s router-overhead --router URL --replicas URL,URL,... [--scenario NAME] [--out DIR]
|  %(prog)s whatif --profile TWIN.toml --baseline RUN_DIR --vary max-num-seqs=4,16 [--vary input-tokens=256] ..."""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The parser of every command; ``prog`` names the command in usage lines and errors (``vllm-stress``)."""
    return build_parsers(prog)[0]


def build_parsers(prog: str = PROG) -> tuple[argparse.ArgumentParser, Mapping[str, argparse.ArgumentParser]]:
    """The parser of every command, and each command's own parser by its name."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="List the scenarios and their settings")
    add_run_arguments(commands.add_parser("run", help="Run a scenario and write its report"))
    add_search_arguments(
        commands.add_parser(
            "search",
            help="Find the highest concurrency or arrival rate that meets every SLO (steady probes, bracket then bisect)",
        )
    )
    parallel.add_arguments(
        commands.add_parser(
            "parallel",
            help="Run fixed question sets at parallelism 1, 4, 16 ... and report speedup, accuracy and changed answers",
        )
    )
    plan.add_arguments(
        commands.add_parser(
            "plan",
            help="How many worker processes and machines a load needs (from "
            "the client's CPU per token), or check that against a run; with --target-rate, how many server "
            "replicas, GPUs and dollars an hour a rate needs",
        )
    )
    routercost.add_arguments(
        commands.add_parser(
            "router-overhead",
            help="Run a scenario straight at the replicas (each at its share) and through their router, and "
            "compare the two: what the router adds at each level",
        )
    )
    whatif.add_arguments(
        commands.add_parser(
            "whatif",
            help="Run a matrix of changed server settings and workloads against a calibrated twin and put them beside "
            "the measured baseline in one table",
        )
    )
    return parser, commands.choices


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--scenario",
        default=DEFAULT_SCENARIO,
        help="Name of a file in scenarios/configs (without .conf; `vllm-stress list` shows them) (default: %(default)s, "
        "a first look bounded by its --max-minutes)",
    )
    run.add_argument("--target", default="", help="Base URL of the server (default: start the embedded simulator)")
    run.add_argument("--out", default="", help="Output folder (default: results/<scenario>)")
    add_run_options(run)
    run.add_argument(
        "--master-bind-host",
        default="",
        metavar="ADDR",
        help="Have the master listen at ADDR (an address the worker hosts reach) for --expect-workers workers that "
        "`vllm-stress worker --master-host ADDR` keeps on each worker host for every repeat; this host then starts "
        "no workers of its own unless --workers is given (default: 127.0.0.1, local workers only)",
    )
    run.add_argument(
        "--master-bind-port",
        type=int,
        default=MASTER_PORT,
        metavar="P",
        help="With --master-bind-host: the master's port, the workers' --master-port (default: %(default)s)",
    )
    run.add_argument(
        "--expect-workers",
        type=int,
        default=0,
        metavar="N",
        help="With --master-bind-host: worker processes of other hosts to wait for (at most "
        f"{REMOTE_WORKER_CONNECT_WAIT_S} s), the sum of their --processes (`vllm-stress plan` prints it)",
    )
    run.add_argument("--overwrite", action="store_true", help="Replace the output folder if it exists")
    run.add_argument("--matrix", default="", help="TOML file of [[cell]] server settings to run the scenario in")
    run.add_argument(
        "--server-cmd",
        default="",
        help="Command that starts the target with a matrix cell's flags "
        "appended (e.g. deploy/vllm-serve.sh ...); required for --matrix with --target",
    )
    run.add_argument(
        "--server-ready-timeout",
        type=float,
        default=SERVER_READY_TIMEOUT_S,
        metavar="S",
        help="Seconds the --server-cmd server may take to list its model (default: %(default).0f)",
    )
    run.add_argument(
        "--simulator-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="Extra argument for the embedded simulator (repeatable), e.g. --simulator-arg=--max-num-seqs=64",
    )
    run.add_argument(
        "--locust-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="Extra argument for the Locust master and workers (repeatable), e.g. --locust-arg=--temperature=0.7",
    )


def add_run_options(run: argparse.ArgumentParser) -> None:
    """The options a scenario file sets too (RUN_OPTIONS), each defaulting to the scenario's value."""
    quickstart = read_config(DEFAULT_SCENARIO)[1] if DEFAULT_SCENARIO in scenario_names() else {}
    for name, settings in RUN_OPTIONS.items():
        default = f"; {quickstart[name]} in {DEFAULT_SCENARIO}" if name in quickstart else ""
        help_text = f"{settings['help']} (default: the scenario's{default})"
        run.add_argument(f"--{name}", **(settings | {"help": help_text}), default=None)
    run.add_argument(
        "--user",
        choices=list(LOCUSTFILES),
        default=None,
        help="The user class (default: the scenario's locustfile)",
    )


def add_search_arguments(slo: argparse.ArgumentParser) -> None:
    slo.add_argument("--scenario", required=True, help="The scenario whose user class and token profile to probe")
    slo.add_argument(
        "--slo",
        required=True,
        metavar="NAME=LIMIT,...",
        help=f"Limits on each probe's level (metrics {', '.join(SLO_METRICS)} or success): {SLO_HELP}",
    )
    slo.add_argument("--target", default="", help="Base URL of the server (default: start the embedded simulator)")
    slo.add_argument(
        "--over",
        choices=list(OVER),
        default="users",
        help="users: closed-loop concurrency; rate: open-loop arrival rate in requests/s "
        "(--arrival-rate) (default: %(default)s)",
    )
    slo.add_argument(
        "--low", type=float, default=None, help="First load probed (default: 1 user, or 1 req/s over rate)"
    )
    slo.add_argument(
        "--high", type=float, default=None, help="Highest load probed (default: 1024 users, or 512 req/s over rate)"
    )
    slo.add_argument(
        "--precision",
        type=float,
        default=0.1,
        help="Stop when the pass and the fail are this share of the pass apart (default: %(default)s)",
    )
    slo.add_argument(
        "--pool-seconds",
        type=float,
        default=DEFAULT_POOL_SECONDS,
        help="Over rate: each probe runs ceil(rate x this) users to carry its arrivals; must exceed the "
        "e2e latency (default: %(default)s)",
    )
    slo.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="Runs per probe; it is judged on their mean, with its 95%% CI (default: %(default)s)",
    )
    slo.add_argument("--max-probes", type=int, default=12, help="At most this many probes (default: %(default)s)")
    slo.add_argument(
        "--web-port",
        type=int,
        default=0,
        help="Serve each probe's Locust web UI on 127.0.0.1:PORT while it runs (its dashboard, "
        "/llm/dashboard, shows the probe and the verdict so far; default: headless)",
    )
    slo.add_argument("--workers", type=int, default=0, help="Locust worker processes (default: as for run)")
    slo.add_argument(
        "--out", default="", help="Output folder (default: results/<scenario>-search); a search folder is resumed"
    )
    slo.add_argument("--overwrite", action="store_true", help="Replace the output folder if it is not a search's")
    slo.add_argument("--simulator-arg", action="append", default=[], metavar="ARG", help="As for run")
    slo.add_argument("--locust-arg", action="append", default=[], metavar="ARG", help="As for run")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(name)s: %(message)s")
    args = build_parser(prog).parse_args(argv)
    stop_on_signals()
    try:
        if args.command == "list":
            print(scenario_table())
        elif args.command == "plan":
            print(plan.run_from_args(args))
        elif args.command == "parallel":
            parallel.run_from_args(args)
        elif args.command == "search":
            print(search_from_args(args))
        elif args.command == "router-overhead":
            return routercost.run_from_args(args)
        elif args.command == "whatif":
            print(whatif.run_from_args(args))
        else:
            run_from_args(args)
    except (ScenarioError, AnalysisError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGTERM, SIGHUP: the children are stopped by now
        print(f"interrupted {interrupt}".strip(), file=sys.stderr)
        return exit_code(interrupt)
    return 0


def scenario_table() -> str:
    """The scenarios side by side: user class, prompt and answer tokens, levels, runs, and how long each may take."""
    rows = [("scenario", "user", "tokens in/out", "levels", "runs", "takes at most")]
    for name in scenario_names():
        keys = read_config(name)[1]
        user = Path(keys.get("locustfile", DEFAULT_LOCUSTFILE)).stem
        prompt = "dataset" if keys.get("dataset") else keys.get("input-tokens", str(DEFAULT_INPUT_TOKENS))
        tokens = f"{prompt}/{keys.get('output-tokens', DEFAULT_OUTPUT_TOKENS)}"
        levels = keys.get("levels", RAMP_DEFAULTS["levels"])
        repeats = int(keys.get("repeats") or 1)
        rows.append((name, user, tokens, levels, str(repeats), duration_bound(keys, repeats)))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def duration_bound(keys: dict[str, str], repeats: int) -> str:
    """The longest a scenario's runs take (each level at its bound), or its --max-minutes when that is shorter."""
    bound_min = repeats * longest_run_s(keys) / 60
    budget_min = float(keys.get("max-minutes") or 0)
    if budget_min and budget_min <= bound_min:
        return f"{budget_min:g} min (max-minutes)"
    return f"{bound_min // 60:.0f} h {bound_min % 60:02.0f} min" if bound_min >= 60 else f"{bound_min:.0f} min"


def search_from_args(args: argparse.Namespace) -> str:
    """Run the search; the line printed at its end: the write-up's path and the answer."""
    out = Path(args.out or f"results/{args.scenario}-search")
    result = search(
        args.scenario,
        out,
        parse_slos(args.slo),
        target=args.target or None,
        over=args.over,
        low=args.low,
        high=args.high,
        precision=args.precision,
        max_probes=args.max_probes,
        repeats=args.repeats,
        pool_seconds=args.pool_seconds,
        web_port=args.web_port,
        workers=args.workers or None,
        overwrite=args.overwrite,
        simulator_args=args.simulator_arg,
        locust_args=args.locust_arg,
    )
    answer = "nothing" if result["answer"] is None else f"{result['answer']:g} {UNITS[args.over]}"
    return f"{out / REPORT_FILE}: {answer}"


def run_options(args: argparse.Namespace) -> list[str]:
    """The run's own options given (RUN_OPTIONS) as the Locust arguments they stand for."""
    given = {name: getattr(args, name.replace("-", "_")) for name in RUN_OPTIONS}
    given = {name: value for name, value in given.items() if value is not None}
    if any(given.get(name, 1) < 1 for name in ("repeats", "workers", "gpus")) or given.get("max-minutes", 0) < 0:
        raise ScenarioError("--repeats, --workers and --gpus must be at least 1, --max-minutes at least 0")
    return [f"--{name}={value}" for name, value in given.items()]


def run_from_args(args: argparse.Namespace) -> None:
    if args.server_ready_timeout <= 0 or args.expect_workers < 0:
        raise ScenarioError("--server-ready-timeout must be positive, --expect-workers at least 0")
    run_scenario(
        args.scenario,
        Path(args.out or f"results/{args.scenario}").resolve(),
        target=args.target or None,
        user=args.user or "",
        overwrite=args.overwrite,
        matrix=args.matrix,
        server_cmd=args.server_cmd,
        simulator_args=args.simulator_arg,
        locust_args=[*args.locust_arg, *run_options(args)],
        server_ready_timeout=args.server_ready_timeout,
        master_bind_host=args.master_bind_host,
        master_bind_port=args.master_bind_port,
        expect_workers=args.expect_workers,
    )
