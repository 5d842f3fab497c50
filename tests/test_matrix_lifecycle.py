"""The runner's server lifecycle against a keyed server: readiness with the bearer header, one container per matrix
cell stopped by name before the next starts (a fake ``docker`` on PATH records the calls, tests/fake_docker.py),
a refusal when the target already answers, and repeats refused loudly where they cannot run."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks.harness import read_rows
from tests.helpers import NOWHERE, refused
from vllm_stress.client import options
from vllm_stress.core import schema
from vllm_stress.scenarios.run import config, runner, servers
from vllm_stress.scenarios.run.config import cell_args, cell_name
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.runner import free_port

KEY = "key-4d2b9e71"
CELLS = ({"max-num-seqs": "4", "max-num-batched-tokens": "256"}, {"max-num-seqs": "8", "max-num-batched-tokens": "512"})
# A short scenario with repeats = 2: the runner runs it twice per cell, plain Locust must refuse it. One user and
# a 1 s hold: the lifecycle tests need requests served, not a measurement (each run still takes some 9 s: the
# processes' start and stop and the shape's 1 s ticks).
CONFIG = """locustfile = locustfiles/chat.py
levels = 1
step-time = 1
warmup = 0
ramp-time = 1
input-tokens = 64
output-tokens = 16
repeats = 2
"""


@pytest.fixture
def scenario(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "short.conf").write_text(CONFIG)
    monkeypatch.setattr(config, "CONFIGS", configs)
    return "short"


def serve_cmd(port: int, key_file: Path) -> str:
    return (
        f"deploy/vllm-serve.sh --platform cuda --profile low-latency --model tiny "
        f"--port {port} --api-key-file {key_file} --"
    )


def write_matrix(path: Path, cells) -> str:
    path.write_text("".join("[[cell]]\n" + "".join(f"{k} = {v}\n" for k, v in cell.items()) for cell in cells))
    return str(path)


def test_matrix_stops_each_cells_container_before_the_next(tmp_path, docker, scenario, scenarios, monkeypatch):
    port = free_port()
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", KEY + "\n")  # as a Secret made with --from-file: the newline is dropped
    out = tmp_path / "out"
    matrix = write_matrix(tmp_path / "cells.toml", CELLS)
    target = f"http://127.0.0.1:{port}"
    run = ["run", "--scenario", scenario, "--out", str(out), "--target", target, "--workers", "1", "--matrix", matrix]
    assert scenarios([*run, "--server-cmd", serve_cmd(port, key_file)]) == 0
    calls = docker()
    assert [c["command"] for c in calls] == ["run", "stop", "run", "stop"]
    assert {c["name"] for c in calls} == {f"vllm-serve-{port}"}
    for run, cell in zip(calls[::2], CELLS, strict=True):
        assert run["argv"][-4:] == [arg for k, v in cell.items() for arg in (f"--{k}", v)]
        assert run["key_in_env"] and "VLLM_API_KEY" in run["argv"] and not any(KEY in a for a in run["argv"])
    for stopped, cell in zip(calls[1::2], CELLS, strict=True):
        rows = [row for n in (1, 2) for row in read_rows(out / cell_name(cell) / f"run-{n}" / schema.REQUESTS_FILE)]
        ok = [row for row in rows if not row["error"]]
        # what this cell's own server finished is what this cell's runs measured
        assert ok and len(ok) <= stopped["served"] <= len(rows), (len(ok), stopped["served"], len(rows))
        meta = json.loads((out / cell_name(cell) / "run-1" / schema.RUN_FILE).read_text())
        assert meta["server_launch"] == {
            "kind": "server-cmd",
            "command": [*shlex.split(serve_cmd(port, key_file)), *cell_args(cell)],
        }  # run.json tells the cells apart
    assert not servers.answers(f"http://127.0.0.1:{port}")


def test_a_container_that_outlives_its_client_stops_the_matrix(
    tmp_path, docker, scenario, scenarios, monkeypatch, capsys
):
    """A raw `docker run` as server command: its client dies on SIGTERM, its container does not."""
    port = free_port()
    monkeypatch.setattr(servers, "SERVER_STOP_GRACE_S", 3)
    cmd = f"docker run --name raw -p 127.0.0.1:{port}:8000 --entrypoint vllm img serve tiny"
    matrix = write_matrix(tmp_path / "cells.toml", CELLS)
    target = f"http://127.0.0.1:{port}"
    run = ["run", "--scenario", scenario, "--out", str(tmp_path / "out"), "--target", target, "--workers", "1"]
    # one repeat: the first cell's server is stopped after its last run, however many there are
    assert scenarios([*run, "--repeats", "1", "--matrix", matrix, "--server-cmd", cmd]) == 2
    assert f"127.0.0.1:{port} still answers 3 s after the server command ended" in capsys.readouterr().err
    assert [c["command"] for c in docker()] == ["run"]  # the second cell never started


def test_matrix_refuses_a_target_that_already_answers(tmp_path, docker, scenario, scenarios, simulator, capsys):
    sim = simulator("--profile", "cpu-tiny")
    port = int(sim.url.rsplit(":", 1)[1])
    matrix = write_matrix(tmp_path / "m", CELLS)
    run = ["run", "--scenario", scenario, "--out", str(tmp_path / "out"), "--target", sim.url, "--matrix", matrix]
    assert scenarios([*run, "--server-cmd", serve_cmd(port, tmp_path / "unused")]) == 2
    assert f"something already answers at {sim.url}: stop it first" in capsys.readouterr().err
    assert docker() == []


def test_readiness_sends_the_bearer_key(tmp_path, simulator, monkeypatch):
    sim = simulator("--profile", "cpu-tiny", "--api-key", KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ScenarioError, match="refuses a request without an API key"):
        servers.wait_for_models(sim.url, sim.proc, 30, servers.api_headers([]))
    (tmp_path / "key").write_text(KEY + "\n")
    servers.wait_for_models(sim.url, sim.proc, 30, servers.api_headers([f"--api-key-file={tmp_path / 'key'}"]))
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    with pytest.raises(ScenarioError, match="refuses the API key"):
        servers.wait_for_models(sim.url, sim.proc, 30, servers.api_headers([]))


def test_server_ready_timeout():
    port = free_port()
    never_ready = subprocess.Popen(["sleep", "60"])
    try:
        started = time.monotonic()
        with pytest.raises(ScenarioError, match="was not ready within 2 s"):
            servers.wait_for_models(f"http://127.0.0.1:{port}", never_ready, 2, {})
        assert time.monotonic() - started < 30
    finally:
        never_ready.kill()
        never_ready.wait()


@pytest.mark.parametrize("value", ["key\n", " key \r\n"])
def test_api_key_whitespace_is_dropped(value, tmp_path):
    assert options.api_key(argparse.Namespace(api_key_file="", api_key=value)) == "key"
    (tmp_path / "key").write_text(value)
    assert options.api_key(argparse.Namespace(api_key_file=str(tmp_path / "key"), api_key="")) == "key"


def test_plain_locust_refuses_repeats(run_locust, tmp_path):
    (tmp_path / "short.conf").write_text(CONFIG)
    proc = run_locust(
        "-f",
        "locustfiles/chat.py,scenarios/shape.py",
        "--config",
        str(tmp_path / "short.conf"),
        "--headless",
        "-H",
        NOWHERE,
        "--results-dir",
        str(tmp_path / "run"),
        timeout=60,
    )
    refused(proc, "repeats = 2: plain Locust runs once; use `python -m scenarios run`, or pass --repeats 1")


@pytest.mark.parametrize(("cores", "workers"), [(2, 2), (8, 8), (192, 8), (None, 1)])
def test_default_workers_are_capped(monkeypatch, cores, workers):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert runner.default_workers() == workers
