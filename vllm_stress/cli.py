"""``vllm-stress``: one command for the suite's tools, the same as their ``python -m`` forms (``HELP``); each tool's
parser is named after the command that runs it (``vllm-stress run --help``)."""

from __future__ import annotations

import sys
from pathlib import Path

from vllm_stress.users import LOCUSTFILES

PROG = "vllm-stress"
SCENARIO_COMMANDS = ("run", "list", "search", "parallel", "plan")
LOCUSTFILE_USAGE = f"""\
{PROG} locustfile [NAME]              a locustfile's path, for locust -f: a user class's
                                           ({", ".join(LOCUSTFILES)}; chat by default) or the ramp shape's (shape)"""
HELP = f"""\
{PROG} run --scenario demo ...        python -m scenarios run ...
{PROG} list                           python -m scenarios list
{PROG} search --slo ttft_p99=2000 ... python -m scenarios search ...
{PROG} parallel --dataset FILE ...    python -m scenarios parallel ...
{PROG} plan --users N ...             python -m scenarios plan ...
{PROG} analyse DIR --out OUT ...      python -m analysis DIR --out OUT ...
{PROG} analyse compare BASE CAND ...  python -m analysis compare BASE CAND ... (and analyse history)
{PROG} simulate --profile NAME ...    python -m simulator ...
{PROG} calibrate --from-run DIR ...   python -m simulator calibrate ... (a twin's profile from a sweep)
{PROG} worker --master-host ADDR ...  a worker host's Locust workers for every run of `run --master-bind-host ADDR`
{LOCUSTFILE_USAGE}
{PROG} COMMAND --help                 that command's options"""


def locustfile(name: str = "chat") -> Path:
    """The file of a user class (``vllm_stress/users/NAME.py``) or of the ramp shape ("shape")."""
    if name == "shape":
        from vllm_stress.scenarios.runner import SHAPE

        return SHAPE
    from vllm_stress import users

    try:
        return users.locustfile(name)
    except ValueError as error:
        raise SystemExit(f"error: {error} or shape") from None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command in SCENARIO_COMMANDS:
        from vllm_stress.scenarios.cli import main as scenarios_main

        return scenarios_main([command, *rest], PROG)
    if command in ("analyse", "analyze"):
        from vllm_stress.analysis.cli import main as analysis_main

        return analysis_main(rest, f"{PROG} {command}")
    if command == "simulate":
        from vllm_stress.simulator.cli import main as simulator_main

        return simulator_main(rest, f"{PROG} simulate")
    if command == "calibrate":
        from vllm_stress.scenarios.calibrate import main as calibrate_main

        return calibrate_main(rest, f"{PROG} calibrate")
    if command == "worker":
        from vllm_stress.scenarios.worker import main as worker_main

        return worker_main(rest, f"{PROG} worker")
    if command == "locustfile":
        print(LOCUSTFILE_USAGE if rest[:1] in (["-h"], ["--help"]) else locustfile(*rest[:1]))
        return 0
    print(HELP, file=sys.stderr if command not in ("-h", "--help") else sys.stdout)
    return 0 if command in ("-h", "--help") else 2
