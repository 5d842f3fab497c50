"""The server a scenario measures (vllm_stress/scenarios/run/servers.py), without starting one: what run.json records of
its launch, the bearer header, whether anything answers at a URL, and the checks before a server command."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys

import pytest

from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.servers import answers, api_headers, launch_args, server, wait_closed, wait_for_models

KEY = "key-4d2b9e71"


@pytest.fixture
def listening():
    """A URL where a socket listens (it accepts TCP connections, answers nothing)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def closed():
    """A URL where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_launch_is_recorded_per_kind_of_server():
    assert launch_args("http://127.0.0.1:8000", ["--x"]) == []  # a --target alone: nothing started
    (simulator,) = launch_args(None, ["--profile", "cpu-tiny"])
    assert json.loads(simulator.split("=", 1)[1]) == {
        "kind": "simulator",
        "command": ["python", "-m", "vllm_stress.simulator", "--profile", "cpu-tiny"],
    }


def test_credentials_in_a_launch_command_are_not_recorded():
    command = [
        "vllm",
        "serve",
        "m",
        "--api-key",
        KEY,
        "--api-key-file",
        "/run/key",
        "--hf-token=hf_x",
        "HF_TOKEN=y",
        "--max-num-seqs",
        "8",
        "--tokenizer",
        "t",
    ]
    launch = json.loads(launch_args(None, [], shlex.join(command))[0].split("=", 1)[1])
    assert launch == {
        "kind": "server-cmd",
        "command": [
            "vllm",
            "serve",
            "m",
            "--api-key",
            "***",
            "--api-key-file",
            "/run/key",
            "--hf-token=***",
            "HF_TOKEN=***",
            "--max-num-seqs",
            "8",
            "--tokenizer",
            "t",
        ],
    }


def test_the_bearer_header_comes_from_the_environment_or_a_key_file(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert api_headers(["--output-tokens=64"]) == {}
    monkeypatch.setenv("OPENAI_API_KEY", KEY + "\n")
    assert api_headers([]) == {"Authorization": f"Bearer {KEY}"}
    (tmp_path / "key").write_text("other\n")
    assert api_headers([f"--api-key-file={tmp_path / 'key'}"]) == {"Authorization": "Bearer other"}
    with pytest.raises(ScenarioError, match="^--api-key-file: "):
        api_headers([f"--api-key-file={tmp_path / 'missing'}"])


def test_answers_is_whether_a_port_accepts_connections(listening, closed):
    assert answers(listening) and not answers(closed)
    wait_closed(closed, timeout=0)  # returns at once
    with pytest.raises(ScenarioError, match="still answers 0 s after the server command ended"):
        wait_closed(listening, timeout=0)


def test_a_given_target_is_used_as_it_is():
    with server("http://127.0.0.1:1", ["--ignored"]) as url:
        assert url == "http://127.0.0.1:1"


def test_a_server_command_needs_a_target_and_a_free_one(listening):
    with pytest.raises(ScenarioError, match="--server-cmd needs --target"), server(None, [], "true"):
        pass
    with pytest.raises(ScenarioError, match=f"something already answers at {listening}"), server(listening, [], "true"):
        pass


def test_a_server_command_that_exits_before_it_is_ready_is_an_error(closed):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    with pytest.raises(ScenarioError, match="the server command exited with code 0 before it was ready"):
        wait_for_models(closed, proc, 30, {})
