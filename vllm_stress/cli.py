"""``vllm-stress``: one command for all the suite's tools. ``COMMANDS`` is their registry: the top-level help, the
dispatch, the reference page (vllm_stress/docsgen.py) and the test of every command's ``--help`` read it; a command is
added by adding a ``Command`` to it. Each tool's parser is named after the command that runs it
(``vllm-stress run --help``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from vllm_stress.users import LOCUSTFILES

PROG = "vllm-stress"
DISTRIBUTION = "vllm-stress"


@dataclass(frozen=True)
class Command:
    """One ``vllm-stress NAME``: its arguments and summary for the help, ``main(argv, prog)`` (an exit code) and
    ``parsers(prog)``: its parser and those of its subcommands, named after ``prog`` (for the docs and the test)."""

    name: str
    usage: str
    summary: str
    main: Callable[[list[str], str], int]
    parsers: Callable[[str], list[argparse.ArgumentParser]]
    aliases: tuple[str, ...] = ()


def scenario_command(name: str, usage: str, summary: str) -> Command:
    """A command of vllm_stress/scenarios/cli.py, whose parser holds them all as subcommands."""

    def run(argv: list[str], prog: str) -> int:
        from vllm_stress.scenarios.cli import main

        return main([name, *argv], prog.rsplit(" ", 1)[0])

    def parsers(prog: str) -> list[argparse.ArgumentParser]:
        from vllm_stress.scenarios.cli import build_parsers

        return [build_parsers(prog.rsplit(" ", 1)[0])[1][name]]

    return Command(name, usage, summary, run, parsers)


def analyse(argv: list[str], prog: str) -> int:
    from vllm_stress.analysis.cli import main

    return main(argv, prog)


def analyse_parsers(prog: str) -> list[argparse.ArgumentParser]:
    from vllm_stress.analysis import cli as analysis_cli

    return [
        analysis_cli.build_parser(prog),
        analysis_cli.build_compare_parser(f"{prog} compare"),
        analysis_cli.build_history_parser(f"{prog} history"),
    ]


def simulate(argv: list[str], prog: str) -> int:
    from vllm_stress.simulator.cli import main

    return main(argv, prog)


def simulate_parsers(prog: str) -> list[argparse.ArgumentParser]:
    from vllm_stress.simulator.cli import build_parser

    return [build_parser(prog)]


def calibrate(argv: list[str], prog: str) -> int:
    from vllm_stress.scenarios.studies.calibrate import main

    return main(argv, prog)


def calibrate_parsers(prog: str) -> list[argparse.ArgumentParser]:
    from vllm_stress.scenarios.studies.calibrate import build_parser

    return [build_parser(prog)]


def locustfile(name: str = "chat") -> Path:
    """The file of a user class (``vllm_stress/users/NAME.py``) or of the ramp shape ("shape")."""
    if name == "shape":
        from vllm_stress.scenarios.run.runner import SHAPE

        return SHAPE
    from vllm_stress import users

    try:
        return users.locustfile(name)
    except ValueError as error:
        raise SystemExit(f"error: {error} or shape") from None


def worker(argv: list[str], prog: str) -> int:
    from vllm_stress.scenarios.run.worker import main

    return main(argv, prog)


def worker_parsers(prog: str) -> list[argparse.ArgumentParser]:
    from vllm_stress.scenarios.run.worker import build_parser

    return [build_parser(prog)]


def locust_help(name: str) -> str:
    """Locust's ``--help`` with the options the locustfile ``name`` adds. ``locust -f FILE --help`` lists Locust's own
    only: Locust answers ``--help`` before it imports the locustfiles whose ``init_command_line_parser`` listeners add
    theirs (locust/argument_parser.py, parse_locustfile_option)."""
    import importlib

    locustfile(name)  # a clear error for an unknown name
    os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"  # no run here: without gevent's patching (ssl is imported by now)
    try:
        importlib.import_module(
            "vllm_stress.scenarios.shapes.shape" if name == "shape" else f"vllm_stress.users.{name}"
        )
    finally:
        del os.environ["LOCUST_SKIP_MONKEY_PATCH"]
    from locust.argument_parser import get_parser

    return get_parser().format_help()


def locustfile_parsers(prog: str) -> list[argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog=prog, description="Print a locustfile's path, for locust -f (e.g. locust -f $(vllm-stress locustfile))."
    )
    parser.add_argument(
        "--locust-help",
        action="store_true",
        help="print Locust's --help with the options the locustfile adds instead (locust -f FILE --help lists "
        "Locust's own only: Locust reads --help before it imports a locustfile)",
    )
    parser.add_argument(
        "name",
        nargs="?",
        default="chat",
        metavar="NAME",
        help=f"a user class ({', '.join(LOCUSTFILES)}) or the step ramp's shape (shape) (default: %(default)s)",
    )
    return [parser]


def print_locustfile(argv: list[str], prog: str) -> int:
    args = locustfile_parsers(prog)[0].parse_args(argv)
    print(locust_help(args.name) if args.locust_help else locustfile(args.name))
    return 0


COMMANDS = (
    scenario_command("run", "[--target URL] [--scenario NAME] ...", "load test a server and write the report"),
    scenario_command("list", "", "the scenarios, their settings and how long each may take"),
    scenario_command("search", "--slo NAME=LIMIT,... ...", "the highest load that meets every SLO"),
    scenario_command("parallel", "--dataset FILE ...", "fixed question sets at rising parallelism"),
    scenario_command("plan", "--users N ... | --target-rate R ...", "worker machines for a load, or replicas"),
    scenario_command("whatif", "--profile TWIN --baseline DIR ...", "changed settings run against a twin"),
    scenario_command("router-overhead", "--router URL --replicas URL,...", "what a router adds at each level"),
    Command(
        "analyse",
        "DIR... --out OUT | compare BASE CAND | history",
        "run folders to a report, a regression gate, the results store",
        analyse,
        analyse_parsers,
        aliases=("analyze",),
    ),
    Command("simulate", "--profile NAME ...", "the embedded vLLM simulator", simulate, simulate_parsers),
    Command("calibrate", "--from-run DIR... --out TOML", "a twin's profile from a sweep", calibrate, calibrate_parsers),
    Command("locustfile", "[NAME]", "a locustfile's path, for locust -f", print_locustfile, locustfile_parsers),
    Command(
        "worker",
        "--master-host ADDR [--processes N]",
        "a worker host's Locust workers for every repeat of `run --master-bind-host`",
        worker,
        worker_parsers,
    ),
)


def find(name: str) -> Command | None:
    return next((c for c in COMMANDS if name == c.name or name in c.aliases), None)


def help_text() -> str:
    """The top-level help: one line per command of the registry."""
    width = max(len(f"{c.name} {c.usage}") for c in COMMANDS)
    lines = [f"usage: {PROG} COMMAND [ARGS]   ({PROG} COMMAND --help: that command's options)", ""]
    lines += [f"  {PROG} {f'{c.name} {c.usage}':<{width}}  {c.summary}" for c in COMMANDS]
    return "\n".join([*lines, "", f"  {PROG} --version"])


def package_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    name, rest = (args[0], args[1:]) if args else ("", [])
    command = find(name)
    if command:
        return command.main(rest, f"{PROG} {name}")
    if name in ("-V", "--version"):
        print(f"{PROG} {package_version()}")
        return 0
    asked = name in ("-h", "--help")
    print(help_text(), file=sys.stdout if asked else sys.stderr)
    if name and not asked:
        print(f"{PROG}: error: unknown command {name!r}", file=sys.stderr)
    return 0 if asked else 2
