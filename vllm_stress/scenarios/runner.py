"""Runs a scenario: a Locust master and its workers as separate processes against the scenario's server,
``--repeats`` times per matrix cell, then the analysis into ``OUT/report`` (docs/concepts/scenarios.md, section 4)."""

from __future__ import annotations

import logging
import os
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_stress import users
from vllm_stress.core import schema
from vllm_stress.scenarios.budget import Budget
from vllm_stress.scenarios.config import (
    ROOT,
    cell_args,
    cell_name,
    header_comment,
    read_config,
    read_matrix,
    report_options,
    with_overrides,
)
from vllm_stress.scenarios.errors import ScenarioError
from vllm_stress.scenarios.folders import has_rows, prepare_out
from vllm_stress.scenarios.levels import longest_run_s
from vllm_stress.scenarios.servers import SERVER_READY_TIMEOUT_S, api_headers, launch_args, server, span_args
from vllm_stress.simulator.process import stop_process

if TYPE_CHECKING:
    from vllm_stress.analysis.summary import Summary

log = logging.getLogger("scenarios")

DEFAULT_LOCUSTFILE = "chat"
SHAPE = Path(__file__).with_name("shape.py")
WORKER_CONNECT_WAIT_S = 60
STOP_GRACE_S = 30
# Default worker processes: one per core, but at most this many. One worker core times about 20,000 streamed
# tokens/s at half its CPU (benchmarks/client.md); 8 cover 160,000 tokens/s, more than 1,000 streams of any
# single GPU server, and leave the cores of a GPU host to vLLM. Pass --workers for more.
MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """One Locust worker process per core, but at most MAX_DEFAULT_WORKERS (the cores of a GPU host serve vLLM)."""
    return min(os.cpu_count() or 1, MAX_DEFAULT_WORKERS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_locust(
    name: str,
    config: Path,
    keys: dict[str, str],
    target: str,
    run_dir: Path,
    workers: int,
    extra_args: list[str],
    web_port: int = 0,
    label: str = "",
    limit_s: float | None = None,
) -> int:
    """One run: a headless master (with ``web_port``: one serving Locust's web UI on 127.0.0.1:web_port, started at
    once and quitting at the end) and ``workers`` worker processes on this machine; returns the master's exit code.
    ``label`` goes before the run's progress lines ("Run 2 of 5", a search's probe); the run is stopped after
    ``limit_s`` (default: its longest by the ramp's options)."""
    port = str(free_port())
    common = locust_command(config, keys, target, extra_args)
    master_cmd = common + master_args(name, run_dir, port, workers, web_port, label)
    worker_cmd = common + ["--worker", "--master-host", "127.0.0.1", "--master-port", port]
    # own sessions: a Ctrl-C reaches only this process, which stops the master first (it collects the workers' last
    # rows and marks the run incomplete), then the workers
    master = subprocess.Popen(master_cmd, cwd=ROOT, start_new_session=True)
    children = [subprocess.Popen(worker_cmd, cwd=ROOT, start_new_session=True) for _ in range(workers)]
    return wait_for_run(master, children, limit_s or longest_run_s(keys))


def locust_command(config: Path, keys: dict[str, str], target: str, extra_args: list[str]) -> list[str]:
    """What the master and the workers run: the scenario's user class with the step ramp, its config, the target."""
    user_file = Path(keys.get("locustfile", DEFAULT_LOCUSTFILE).split(",")[0]).stem  # locustfiles/NAME.py
    locustfile = f"{users.locustfile(user_file)},{SHAPE}"
    common = [sys.executable, "-m", "locust", "-f", locustfile, "--config", str(config), "-H", target, *extra_args]
    # --repeats 1: this is one of the runner's repeats (a config's `repeats` is refused by plain Locust)
    return [*common, "--repeats", "1"]


def master_args(name: str, run_dir: Path, port: str, workers: int, web_port: int, label: str) -> list[str]:
    ui = (
        ["--web-host", "127.0.0.1", "--web-port", str(web_port), "--autostart", "--autoquit", "0"]
        if web_port
        else ["--headless"]
    )
    return [
        "--master",
        *ui,
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        port,
        "--expect-workers",
        str(workers),
        "--expect-workers-max-wait",
        str(WORKER_CONNECT_WAIT_S),
        "--results-dir",
        str(run_dir),
        "--csv",
        str(run_dir / schema.LOCUST_CSV_PREFIX),
        "--scenario",
        name,
        *([f"--run-label={label}"] if label else []),
    ]


def wait_for_run(master: subprocess.Popen, workers: list[subprocess.Popen], limit_s: float) -> int:
    """The master's exit code, once it ended or was stopped after ``limit_s``; the workers are stopped after it."""
    try:
        code = master.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        log.error("the run did not end within %.0f s: stopping it", limit_s)
        code = stop_process(master, STOP_GRACE_S)
    finally:  # also on Ctrl-C: stop the master first so it keeps what the workers send
        if master.poll() is None:
            stop_process(master, STOP_GRACE_S)
        for worker in workers:
            stop_process(worker, STOP_GRACE_S)
    return code


@dataclass
class Repeats:
    """The runs of a scenario against one server: its Locust config, keys and arguments."""

    name: str
    config: Path
    keys: dict[str, str]
    url: str
    workers: int
    locust_args: list[str]
    budget: Budget

    def run(self, folder: Path, repeats: int) -> list[Path]:
        """``repeats`` runs into ``folder/run-K``; a run that measured no request is a ScenarioError."""
        run_dirs = []
        for repeat in range(1, repeats + 1):
            run_dir = folder / f"run-{repeat}"
            budget_args = self.budget.run_args(repeat, repeats)
            if budget_args is None:
                break
            log.info("%s: run %d of %d against %s -> %s", self.name, repeat, repeats, self.url, run_dir)
            label = f"Run {repeat} of {repeats}" if repeats > 1 else ""
            limit_s = self.budget.limit_s(longest_run_s(self.keys))
            args = [*self.locust_args, *budget_args]
            code = run_locust(
                self.name, self.config, self.keys, self.url, run_dir, self.workers, args, label=label, limit_s=limit_s
            )
            if not has_rows(run_dir / schema.REQUESTS_FILE):
                raise ScenarioError(f"run {repeat} measured no request (Locust exit code {code}; its log says why)")
            run_dirs.append(run_dir)
        return run_dirs


def run_scenario(
    name: str,
    out: Path,
    target: str | None = None,
    repeats: int | None = None,
    workers: int | None = None,
    overwrite: bool = False,
    matrix: str = "",
    server_cmd: str = "",
    simulator_args: list[str] | None = None,
    locust_args: list[str] | None = None,
    server_ready_timeout: float = SERVER_READY_TIMEOUT_S,
    user: str = "",
) -> Summary:
    """Run a scenario (and its matrix cells) and analyse it; returns the analysis summary. The scenario's keys, or
    the same options in ``locust_args``, set its repeats, workers, time budget and report options (``--gpus`` ...);
    ``user`` names its user class instead of its config's locustfile."""
    from vllm_stress.analysis.report import analyse  # here: `vllm-stress locustfile shape` needs no pandas

    config, keys = read_config(name)
    out = out.resolve()  # the Locust processes run in the suite's folder
    locust_args = list(locust_args or [])
    keys = with_overrides(keys, locust_args) | ({"locustfile": user} if user else {})
    budget = Budget(float(keys.get("max-minutes") or 0))
    if any(arg.split("=", 1)[0] == "--api-key" for arg in locust_args):
        raise ScenarioError(
            "pass the API key as OPENAI_API_KEY or --locust-arg=--api-key-file=FILE, never on a "
            "command line (every user of the machine can read those)"
        )
    repeats = repeats or int(keys.get("repeats") or 1)
    workers = workers or int(keys.get("workers") or 0) or default_workers()
    cells = read_matrix(matrix) if matrix else [{}]
    if matrix and target and not server_cmd:
        raise ScenarioError("--matrix with --target needs --server-cmd to restart the server for each cell")
    if server_cmd and not target:
        raise ScenarioError("--server-cmd needs --target: the URL its server will answer at")
    base_sim_args = shlex.split(keys.get("simulator", "")) + list(simulator_args or [])
    headers = api_headers(locust_args)
    prepare_out(out, overwrite)
    log.info("%s", " ".join(header_comment(config)))
    budget.announce()
    labels: dict[str, str] = {}  # run folder -> what the report calls it
    for cell in cells:
        sim_args = (base_sim_args if not server_cmd else []) + cell_args(cell) + span_args(keys, locust_args, target)
        with server(target, sim_args, server_cmd, headers, server_ready_timeout) as url:
            args = [*locust_args, *launch_args(target, sim_args, server_cmd)]
            runs = Repeats(name, config, keys, url, workers, args, budget)
            for run_dir in runs.run(out / cell_name(cell) if matrix else out, repeats):
                labels[str(run_dir)] = cell_name(cell) if matrix else name
    summary = analyse(list(labels), out / "report", labels=labels, **report_options(keys))
    log.info("report: %s", out / "report" / "report.md")
    return summary
