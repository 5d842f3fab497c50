"""``python -m scenarios router-overhead``: the same scenario run straight at the replicas (the users spreading
their requests round robin, each replica at its share) and through the router in front of them, in turn, compared with
``python -m analysis compare`` (baseline: straight; candidate: through the router), so that what the router adds
to TTFT and the rest shows at each level (docs/guides/fleets.md, "What the router costs")."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vllm_stress.analysis.cli import compare_main
from vllm_stress.core import fleet
from vllm_stress.scenarios.run.config import read_config
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.runner import run_scenario

log = logging.getLogger(__name__)
SIDES = ("straight", "router")  # the two run folders under --out: the baseline, then the candidate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--router", required=True, help="Base URL of the router in front of the replicas")
    parser.add_argument(
        "--replicas", required=True, help="The replicas' base URLs behind it, comma-separated (http://a:8000,...)"
    )
    parser.add_argument("--scenario", default="smoke", help="The scenario run both ways (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=0, help="Runs of each side (default: the scenario's own)")
    parser.add_argument("--out", default="", help="Output folder (default: results/router-overhead)")
    parser.add_argument("--workers", type=int, default=0, help="Locust worker processes (default: as for run)")
    parser.add_argument("--overwrite", action="store_true", help="Replace the output folders if they exist")
    parser.add_argument("--locust-arg", action="append", default=[], metavar="ARG", help="As for run")


def run_from_args(args: argparse.Namespace) -> int:
    """Both sides, a run of each in turn (a machine's drift falls on both), then compare's verdict: its exit code
    (0: the router added nothing past the noise)."""
    replicas = fleet.replica_urls(args.replicas)
    if not replicas:
        raise ScenarioError("--replicas names no URL")
    out = Path(args.out or "results/router-overhead").resolve()
    scraped = [f"--server-metrics-url={url}/metrics" for url in replicas]
    targets = {"straight": ",".join(replicas), "router": args.router}
    repeats = args.repeats or int(read_config(args.scenario)[1].get("repeats", 1))
    for repeat in range(1, repeats + 1):
        for side in SIDES:
            log.info("router-overhead: repeat %d of %d, %s -> %s", repeat, repeats, side, targets[side])
            run_scenario(
                args.scenario,
                out / side / f"repeat-{repeat}",
                target=targets[side],
                repeats=1,
                workers=args.workers or None,
                overwrite=args.overwrite,
                locust_args=[*args.locust_arg, *scraped],
            )
    straight, router = (sorted(map(str, (out / side).glob("repeat-*/run-1"))) for side in SIDES)
    return compare_main(["--baseline", *straight, "--candidate", *router, "--out", str(out / "compare")])
