"""Runs a scenario: the target (the embedded simulator unless ``--target``), a Locust master and its workers as
separate processes, ``--repeats`` times into ``OUT/run-1 … run-N``, then the analysis into ``OUT/report``.
With a matrix, the server is (re)started with each cell's settings and every cell is run and compared: a server
command must stop its server on SIGTERM (``deploy/vllm-serve.sh`` runs ``docker stop`` on its named container), and
a cell starts only once nothing answers at the target any more, so no cell measures the previous cell's server.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from vllm_stress import users
from vllm_stress.client import options
from vllm_stress.client.serverinfo import launch_option
from vllm_stress.core import schema
from vllm_stress.scenarios.levels import RAMP_DEFAULTS, RAMP_TIMES, check_times, longest_run_s, parse_levels

log = logging.getLogger("scenarios")

PACKAGE = Path(__file__).resolve().parents[1]
# Where relative paths of a scenario (its config's dataset, a --server-cmd) are read from: the checkout's root, or
# the installed package, which carries scenarios/configs and scenarios/data too.
ROOT = PACKAGE.parent if (PACKAGE.parent / "scenarios" / "configs").is_dir() else PACKAGE
CONFIGS = PACKAGE / "scenarios" / "configs"
DEFAULT_LOCUSTFILE = "chat"
SHAPE = Path(__file__).with_name("shape.py")
WORKER_CONNECT_WAIT_S = 60
STOP_GRACE_S = 30
# A server command gets longer to stop: vLLM frees its GPUs, and docker stop waits for that.
SERVER_STOP_GRACE_S = 120
SERVER_READY_TIMEOUT_S = 900.0  # a large model's first start downloads and compiles; --server-ready-timeout
# Default worker processes: one per core, but at most this many. One worker core times about 20,000 streamed
# tokens/s at half its CPU (benchmarks/client.md); 8 cover 160,000 tokens/s, more than 1,000 streams of any
# single GPU server, and leave the cores of a GPU host to vLLM. Pass --workers for more.
MAX_DEFAULT_WORKERS = 8


class ScenarioError(Exception):
    """A problem with the scenario's input, reported as one line."""


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


def prepare_out(out: Path, overwrite: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ScenarioError(f"{out} already exists and is not empty; choose another --out or pass --overwrite")
        shutil.rmtree(out)
    out.mkdir(parents=True)


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
) -> int:
    """One run: a headless master (with ``web_port``: one serving Locust's web UI on 127.0.0.1:web_port, started at
    once and quitting at the end) and ``workers`` worker processes on this machine; returns the master's exit code.
    ``label`` goes before the run's progress lines ("Run 2 of 5", a search's probe)."""
    port = str(free_port())
    user_file = Path(keys.get("locustfile", DEFAULT_LOCUSTFILE).split(",")[0]).stem  # locustfiles/NAME.py
    locustfile = f"{users.locustfile(user_file)},{SHAPE}"
    common = [sys.executable, "-m", "locust", "-f", locustfile, "--config", str(config), "-H", target, *extra_args]
    # --repeats 1: this function is one of the runner's repeats (a config's `repeats` is refused by plain Locust)
    common += ["--repeats", "1"]
    ui = (
        ["--web-host", "127.0.0.1", "--web-port", str(web_port), "--autostart", "--autoquit", "0"]
        if web_port
        else ["--headless"]
    )
    master_cmd = (
        common
        + [
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
        ]
        + ([f"--run-label={label}"] if label else [])
    )
    worker_cmd = common + ["--worker", "--master-host", "127.0.0.1", "--master-port", port]
    # own sessions: a Ctrl-C reaches only this process, which stops the master first (it collects the workers' last
    # rows and marks the run incomplete), then the workers
    master = subprocess.Popen(master_cmd, cwd=ROOT, start_new_session=True)
    children = [subprocess.Popen(worker_cmd, cwd=ROOT, start_new_session=True) for _ in range(workers)]
    try:
        code = master.wait(timeout=longest_run_s(keys))
    except subprocess.TimeoutExpired:
        log.error("the run did not end within %.0f s: stopping it", longest_run_s(keys))
        code = stop(master)
    finally:  # also on Ctrl-C: stop the master first so it keeps what the workers send
        if master.poll() is None:
            stop(master)
        for child in children:
            stop(child)
    return code


def has_rows(path: Path) -> bool:
    """``requests.csv`` exists and holds at least one row under its header."""
    if not path.is_file():
        return False
    with path.open() as f:
        return bool(f.readline() and f.readline())


def stop(proc: subprocess.Popen, grace: float = STOP_GRACE_S) -> int:
    """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@contextmanager
def server(
    target: str | None,
    simulator_args: list[str],
    server_cmd: str = "",
    headers: dict | None = None,
    ready_timeout: float = SERVER_READY_TIMEOUT_S,
):
    """Yield the base URL of the server to test: ``target``, a started ``server_cmd``, or a started simulator."""
    if target and not server_cmd:
        yield target
        return
    if server_cmd:
        if answers(target):
            raise ScenarioError(
                f"something already answers at {target}: stop it first (docker ps), so that the "
                "server command's server is the one measured"
            )
        proc = subprocess.Popen(shlex.split(server_cmd) + simulator_args, cwd=ROOT)
        try:
            wait_for_models(target, proc, ready_timeout, headers or {})
            yield target
        finally:
            stop(proc, SERVER_STOP_GRACE_S)
            wait_closed(target, SERVER_STOP_GRACE_S)
        return
    from vllm_stress.simulator.process import start_simulator

    with start_simulator(*simulator_args) as sim:
        log.info("simulator %s serving %s at %s", " ".join(simulator_args), sim.model, sim.url)
        yield sim.url


def launch_args(target: str | None, server_args: list[str], server_cmd: str = "") -> list[str]:
    """The Locust argument that records in run.json how ``server()`` started the server (none for a --target alone)."""
    if server_cmd:
        return [launch_option("server-cmd", shlex.split(server_cmd) + server_args)]
    return [] if target else [launch_option("simulator", ["python", "-m", "vllm_stress.simulator", *server_args])]


def answers(url: str) -> bool:
    """Something accepts TCP connections at the URL's host and port."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)), 2):
            return True
    except OSError:
        return False


def wait_closed(url: str, timeout: float) -> None:
    """Wait until nothing answers at ``url`` (the stopped server has let go of its port)."""
    deadline = time.monotonic() + timeout
    while answers(url):
        if time.monotonic() > deadline:
            raise ScenarioError(
                f"{url} still answers {timeout:.0f} s after the server command ended: its server "
                "(a container? docker ps) must be stopped before another cell can be measured"
            )
        time.sleep(1)


def with_overrides(keys: dict[str, str], locust_args: list[str]) -> dict[str, str]:
    """The config's keys with the ramp options that ``locust_args`` give instead (Locust's command line beats its
    config file), so that the run's time limit follows e.g. ``--locust-arg=--step-time=600``."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for key in RAMP_DEFAULTS:
        parser.add_argument(f"--{key}")
    given = vars(parser.parse_known_args(locust_args)[0])
    return keys | {key: given[key.replace("-", "_")] for key in RAMP_DEFAULTS if given[key.replace("-", "_")]}


def api_headers(locust_args: list[str]) -> dict[str, str]:
    """The bearer header the user classes will send (OPENAI_API_KEY or --api-key-file among ``locust_args``)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--api-key-file", default="")
    known, _ = parser.parse_known_args(locust_args)
    try:
        key = options.api_key(argparse.Namespace(api_key_file=known.api_key_file, api_key=""))
    except OSError as e:
        raise ScenarioError(f"--api-key-file: {e}") from None
    return {"Authorization": f"Bearer {key}"} if key else {}


def wait_for_models(url: str, proc: subprocess.Popen, timeout: float, headers: dict) -> None:
    """Wait until the server at ``url`` lists a model (what a real vLLM does once it is ready)."""
    import requests

    from vllm_stress.core import served

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ScenarioError(f"the server command exited with code {proc.returncode} before it was ready")
        try:
            if served.models(url, headers, timeout=5):
                return
        except requests.HTTPError as e:
            if e.response.status_code == 401:
                raise ScenarioError(
                    f"{url} refuses {'the' if headers else 'a request without an'} API key (HTTP "
                    "401): give the server's key as OPENAI_API_KEY or --locust-arg=--api-key-file=FILE"
                ) from None
        except (requests.RequestException, ValueError):
            pass
        time.sleep(2)
    raise ScenarioError(f"the server at {url} was not ready within {timeout:.0f} s (--server-ready-timeout)")


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
) -> dict:
    """Run a scenario (and its matrix cells) and analyse it; returns the analysis summary."""
    from vllm_stress.analysis.report import analyse

    config, keys = read_config(name)
    out = out.resolve()  # the Locust processes run in the suite's folder
    keys = with_overrides(keys, list(locust_args or []))
    if any(arg.split("=", 1)[0] == "--api-key" for arg in locust_args or []):
        raise ScenarioError(
            "pass the API key as OPENAI_API_KEY or --locust-arg=--api-key-file=FILE, never on a "
            "command line (every user of the machine can read those)"
        )
    repeats = repeats or int(keys.get("repeats", 1))
    workers = workers or default_workers()
    cells = read_matrix(matrix) if matrix else [{}]
    if matrix and target and not server_cmd:
        raise ScenarioError("--matrix with --target needs --server-cmd to restart the server for each cell")
    if server_cmd and not target:
        raise ScenarioError("--server-cmd needs --target: the URL its server will answer at")
    base_sim_args = shlex.split(keys.get("simulator", "")) + list(simulator_args or [])
    headers = api_headers(list(locust_args or []))
    prepare_out(out, overwrite)
    log.info("%s", " ".join(header_comment(config)))
    labels, run_dirs = {}, []
    for cell in cells:
        cell_dir = out / cell_name(cell) if matrix else out
        sim_args = (base_sim_args if not server_cmd else []) + cell_args(cell)
        with server(target, sim_args, server_cmd, headers, server_ready_timeout) as url:
            for repeat in range(1, repeats + 1):
                run_dir = cell_dir / f"run-{repeat}"
                log.info("%s: run %d of %d against %s -> %s", name, repeat, repeats, url, run_dir)
                code = run_locust(
                    name,
                    config,
                    keys,
                    url,
                    run_dir,
                    workers,
                    [*(locust_args or []), *launch_args(target, sim_args, server_cmd)],
                    label=f"Run {repeat} of {repeats}" if repeats > 1 else "",
                )
                if not has_rows(run_dir / schema.REQUESTS_FILE):
                    raise ScenarioError(f"run {repeat} measured no request (Locust exit code {code}; its log says why)")
                run_dirs.append(str(run_dir))
                labels[str(run_dir)] = cell_name(cell) if matrix else name
    summary = analyse(run_dirs, out / "report", labels=labels)
    log.info("report: %s", out / "report" / "report.md")
    return summary
