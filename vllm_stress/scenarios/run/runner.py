"""Runs a scenario: a Locust master and its workers as separate processes against the scenario's server,
``--repeats`` times per matrix cell, then the analysis into ``OUT/report`` (docs/concepts/scenarios.md, section 4).
The workers are local processes, or those of other hosts (``vllm-stress worker``) with ``--master-bind-host``.
Stopped (Ctrl-C, SIGTERM, SIGHUP), it stops its children in order and reports what ran; killed, its children end
by themselves (``core/children.py``)."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_stress import users
from vllm_stress.core import children, schema
from vllm_stress.scenarios.run.budget import Budget
from vllm_stress.scenarios.run.config import (
    ROOT,
    cell_args,
    cell_name,
    header_comment,
    read_config,
    read_matrix,
    report_options,
    with_overrides,
)
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.folders import has_rows, prepare_out
from vllm_stress.scenarios.run.servers import SERVER_READY_TIMEOUT_S, api_headers, launch_args, server, span_args
from vllm_stress.scenarios.run.worker import MASTER_PORT
from vllm_stress.scenarios.shapes.levels import longest_run_s
from vllm_stress.simulator.process import stop_process

if TYPE_CHECKING:
    from vllm_stress.analysis.summary import Summary

log = logging.getLogger("scenarios")

DEFAULT_LOCUSTFILE = "chat"
SHAPE = Path(__file__).parents[1] / "shapes" / "shape.py"
WORKER_CONNECT_WAIT_S = 60
# the first run of a multi-host run waits this long for the worker hosts: time to start `vllm-stress worker` on each
REMOTE_WORKER_CONNECT_WAIT_S = 600
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


@dataclass(frozen=True)
class Workers:
    """The workers a run's master waits for: ``local`` processes the runner starts, and ``remote`` ones that
    ``vllm-stress worker`` keeps on other hosts, which reach the master at ``bind_host:bind_port``."""

    local: int
    remote: int = 0
    bind_host: str = "127.0.0.1"
    bind_port: int = 0  # 0: a free port, for a master that only local workers reach

    @property
    def connect_host(self) -> str:
        """The address the local workers dial."""
        return "127.0.0.1" if self.bind_host in ("*", "0.0.0.0") else self.bind_host


def run_locust(
    name: str,
    config: Path,
    keys: dict[str, str],
    target: str,
    run_dir: Path,
    workers: int | Workers,
    extra_args: list[str],
    web_port: int = 0,
    label: str = "",
    limit_s: float | None = None,
) -> int:
    """One run: a headless master (with ``web_port``: one serving Locust's web UI on 127.0.0.1:web_port, started at
    once and quitting at the end) and ``workers`` (a number of local processes, or :class:`Workers`); returns the
    master's exit code. ``label`` goes before the run's progress lines ("Run 2 of 5", a search's probe); the run is
    stopped after ``limit_s`` (default: its longest by the ramp's options)."""
    spec = workers if isinstance(workers, Workers) else Workers(workers)
    port = str(spec.bind_port or free_port())
    common = locust_command(config, keys, target, extra_args)
    # local workers alone: Locust forks them from the master once it has read the locustfile (--processes; they dial
    # --master-port), so none pays the imports a process started anew pays (0.6 CPU-s, docs/concepts/locust.md §3)
    forked = spec.local > 0 and not spec.remote
    dial = ["--master-host", spec.connect_host, "--master-port", port]
    role = ["--processes", str(spec.local), *dial] if forked else ["--master"]
    master_cmd = common + role + master_args(name, run_dir, spec, port, web_port, label)
    worker_cmd = [*common, "--worker", *dial]
    # own sessions: a Ctrl-C reaches only this process, which stops the master first (it collects the workers' last
    # rows and marks the run incomplete), then the workers (the master stops those it forked); they get SIGTERM if
    # this process is killed
    master = children.popen(master_cmd, cwd=ROOT)
    workers_started = [] if forked else [children.popen(worker_cmd, cwd=ROOT) for _ in range(spec.local)]
    try:
        return wait_for_run(master, workers_started, limit_s or longest_run_s(keys))
    except KeyboardInterrupt:
        mark_partial(run_dir)
        raise


def locust_command(config: Path, keys: dict[str, str], target: str, extra_args: list[str]) -> list[str]:
    """What the master and the workers run: the scenario's user class with the step ramp, its config, the target."""
    user_file = Path(keys.get("locustfile", DEFAULT_LOCUSTFILE).split(",")[0]).stem  # locustfiles/NAME.py
    locustfile = f"{users.locustfile(user_file)},{SHAPE}"
    common = [sys.executable, "-m", "locust", "-f", locustfile, "--config", str(config), "-H", target, *extra_args]
    # --repeats 1: this is one of the runner's repeats (a config's `repeats` is refused by plain Locust)
    return [*common, "--repeats", "1"]


def master_args(name: str, run_dir: Path, workers: Workers, port: str, web_port: int, label: str) -> list[str]:
    ui = (
        ["--web-host", "127.0.0.1", "--web-port", str(web_port), "--autostart", "--autoquit", "0"]
        if web_port
        else ["--headless"]
    )
    return [
        *ui,
        "--master-bind-host",
        workers.bind_host,
        "--master-bind-port",
        port,
        "--expect-workers",
        str(workers.local + workers.remote),
        "--expect-workers-max-wait",
        str(REMOTE_WORKER_CONNECT_WAIT_S if workers.remote else WORKER_CONNECT_WAIT_S),
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
        code = stop_master(master)
    finally:  # also on Ctrl-C: stop the master first so it keeps what the workers send
        if master.poll() is None:
            stop_master(master)
        end_forked_workers(master)
        for worker in workers:
            stop_process(worker, STOP_GRACE_S)
    return code


def end_forked_workers(master: subprocess.Popen) -> None:
    """End the workers a master forked (--processes), if it left any: they share its process group (its own
    session), and inherit no parent-death signal, so a master killed at the stop's end would leave them sending load
    until they missed its heartbeats. A master that ended by itself stopped them; its group is then empty."""
    try:
        os.killpg(master.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_master(master: subprocess.Popen) -> int:
    """Stop a master as Ctrl-C does: it stops its users, collects the workers' last rows and closes the run folder.
    A headless master running a load shape handles no SIGTERM until the shape ends (Locust installs that handler
    after it), so SIGTERM would end it with the folder open; SIGTERM and SIGKILL follow if it does not end."""
    master.send_signal(signal.SIGINT)
    try:
        return master.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        return stop_process(master, STOP_GRACE_S)


def mark_partial(run_dir: Path) -> None:
    """Record in ``run.json`` that the run was stopped before its end: Locust stops a load shape's test before it
    quits on Ctrl-C, so the master takes the stop for the shape's end."""
    path = run_dir / schema.RUN_FILE
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # the master never wrote it: nothing was measured
    path.write_text(json.dumps({**meta, "complete": False}, indent=2))


@dataclass
class Repeats:
    """The runs of a scenario against one server: its Locust config, keys and arguments."""

    name: str
    config: Path
    keys: dict[str, str]
    url: str
    workers: Workers
    locust_args: list[str]
    budget: Budget
    started: list[Path]  # every run folder begun, the one a stop interrupts included

    def run(self, folder: Path, repeats: int) -> list[Path]:
        """``repeats`` runs into ``folder/run-K``; a run that measured no request is a ScenarioError."""
        run_dirs = []
        for repeat in range(1, repeats + 1):
            run_dir = folder / f"run-{repeat}"
            budget_args = self.budget.run_args(repeat, repeats)
            if budget_args is None:
                break
            self.started.append(run_dir)
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
    master_bind_host: str = "",
    master_bind_port: int = MASTER_PORT,
    expect_workers: int = 0,
    user: str = "",
) -> Summary:
    """Run a scenario (and its matrix cells) and analyse it; returns the analysis summary. The scenario's keys, or
    the same options in ``locust_args``, set its repeats, workers, time budget and report options (``--gpus`` ...);
    ``user`` names its user class instead of its config's locustfile. With ``master_bind_host``, the master listens
    there for ``expect_workers`` workers of other hosts (``vllm-stress worker``) besides the ``workers`` it starts
    itself (none unless given)."""
    from vllm_stress.analysis.report.pipeline import analyse  # here: `vllm-stress locustfile shape` needs no pandas

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
    if expect_workers and not master_bind_host:
        raise ScenarioError("--expect-workers needs --master-bind-host: the address the worker hosts reach")
    workers = workers or int(keys.get("workers") or 0) or None
    local = workers if workers is not None else 0 if expect_workers else default_workers()
    spec = Workers(local, expect_workers, master_bind_host, master_bind_port) if master_bind_host else Workers(local)
    if not spec.local + spec.remote:
        raise ScenarioError("a run needs at least one worker process")
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
    try:
        for cell in cells:
            own_args = base_sim_args if not server_cmd else []
            sim_args = own_args + cell_args(cell) + span_args(keys, locust_args, target)
            with server(target, sim_args, server_cmd, headers, server_ready_timeout) as url:
                args = [*locust_args, *launch_args(target, sim_args, server_cmd)]
                runs = Repeats(name, config, keys, url, spec, args, budget, [])
                try:
                    runs.run(out / cell_name(cell) if matrix else out, repeats)
                finally:  # a stopped run's folder too: its master closed it as partial
                    labels |= {str(run_dir): cell_name(cell) if matrix else name for run_dir in runs.started}
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP (stopping.py): the children are stopped; report what ran
        report_stopped(labels, out / "report")
        raise
    summary = analyse(list(labels), out / "report", labels=labels, **report_options(keys))
    log.info("report: %s", out / "report" / "report.md")
    return summary


def report_stopped(labels: dict[str, str], report: Path) -> None:
    """The report of the runs a stopped runner measured (a partial one among them), if any measured a request."""
    from vllm_stress.analysis.io.load import AnalysisError
    from vllm_stress.analysis.report.pipeline import analyse

    measured = {run: label for run, label in labels.items() if has_rows(Path(run) / schema.REQUESTS_FILE)}
    if not measured:
        log.warning("stopped before any request was measured: no report")
        return
    try:
        analyse(list(measured), report, labels=measured)
    except AnalysisError as e:
        log.error("stopped: the report of the runs so far could not be written: %s", e)
        return
    log.warning("stopped: the report of the runs so far (the last one partial): %s", report / "report.md")
