"""Bad input to the suite itself: each is refused before any load with one clear line and a non-zero exit code, never
a traceback, and nothing is overwritten."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.faultserver import MAX_MODEL_LEN, MODEL
from tests.helpers import NOWHERE, REPO, refused
from vllm_stress.analysis.cli import main as analysis_main
from vllm_stress.core import schema
from vllm_stress.scenarios.shapes.levels import parse_levels

SHORT = ["--headless", "--only-summary", "-u", "1", "-t", "5s"]


def scenarios_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scenarios", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_unknown_scenario():
    proc = scenarios_cli("run", "--scenario", "nope")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown scenario 'nope' (known: ") and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10,x", "--levels must be comma-separated whole numbers, got '10,x'"),
        ("0", "--levels must be at least 1 user each, got '0'"),
        ("", "--levels is empty"),
        (" , ", "--levels is empty"),
    ],
)
def test_parse_levels(text, message):
    with pytest.raises(ValueError) as error:
        parse_levels(text)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--levels", "10,x"], "--levels must be comma-separated whole numbers, got '10,x'"),
        (
            ["--levels", "5", "--step-time", "-1"],
            "--step-time must be a number of seconds or auto, at least 0, got '-1'",
        ),
    ],
)
def test_bad_ramp_is_refused_by_the_shape(run_locust, tmp_path, args, message):
    proc = run_locust(
        "-f",
        "locustfiles/chat.py,scenarios/shape.py",
        "-H",
        NOWHERE,
        "--headless",
        "--only-summary",
        "--results-dir",
        str(tmp_path / "run"),
        *args,
        timeout=60,
    )
    refused(proc, message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input-tokens", "-5"], "--input-tokens must be at least 1, got -5"),
        (["--output-tokens", "0"], "--output-tokens must be at least 1, got 0"),
        (["--request-timeout", "0"], "--request-timeout must be more than 0 seconds, got 0"),
        (["--api-key-file", "/nonexistent/key"], "--api-key-file: [Errno 2] No such file or directory"),
        (["--dataset", "/nonexistent/prompts.jsonl"], "--dataset: [Errno 2] No such file or directory"),
        (["--turns", "0"], "--turns must be at least 1, got 0"),
        (["--think-time", "-1"], "--think-time must not be negative, got -1"),
        (
            ["--session-trace", "scenarios/data/agent-sessions-sample.jsonl"],
            "--session-trace: only the session user (locustfiles/session.py) replays sessions",
        ),
    ],
)
def test_bad_options_are_refused_at_test_start(run_locust, tmp_path, args, message):
    proc = run_locust(
        "-f", "locustfiles/chat.py", "-H", NOWHERE, *SHORT, "--results-dir", str(tmp_path / "run"), *args, timeout=60
    )
    refused(proc, message)


@pytest.mark.parametrize(
    ("locustfile", "args", "message"),
    [
        ("session", ["--trace", "scenarios/data/mooncake-sample.jsonl"], "--trace sends each line as a request"),
        ("agent", ["--arrival-rate", "5"], "--arrival-rate and --microburst start requests or sessions on a schedule"),
    ],
)
def test_a_schedule_the_user_cannot_keep_is_refused(run_locust, fault_server, tmp_path, locustfile, args, message):
    """Sessions start on an open loop's arrivals, but replay no request trace; an agent's steps keep no schedule."""
    proc = run_locust(
        *("-f", f"locustfiles/{locustfile}.py", "-H", fault_server.url, *SHORT),
        *("--results-dir", str(tmp_path / "run"), *args),
        timeout=60,
    )
    refused(proc, message)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe\x00 not text", "--dataset: 'utf-8' codec can't decode"),
        (b'{"prompt": "fine"}\n{"text": "no prompt key"}\n', ":2: not a prompt record (KeyError"),
        (b"\n\n", ": no prompts in the file"),
        (b'[{"conversations": [{"from": "gpt", "value": "no human turn"}]}]', ": no conversation with a human turn"),
    ],
)
def test_unreadable_dataset_is_refused(run_locust, tmp_path, content, message):
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_bytes(content)
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        NOWHERE,
        *SHORT,
        "--results-dir",
        str(tmp_path / "run"),
        "--dataset",
        str(dataset),
        timeout=60,
    )
    refused(proc, message)


def test_lengths_over_max_model_len_are_refused_with_the_numbers(run_locust, fault_server, tmp_path):
    prefix = "/fault/ok-too-long"
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        fault_server.url + prefix,
        *SHORT,
        "--results-dir",
        str(tmp_path / "run"),
        "--input-tokens",
        "4000",
        "--output-tokens",
        "200",
        timeout=60,
    )
    refused(
        proc,
        f"--input-tokens 4000 + --output-tokens 200 = 4200 tokens exceeds {MODEL}'s max_model_len of "
        f"{MAX_MODEL_LEN} at {fault_server.url}{prefix}",
    )
    assert fault_server.chat_requests(prefix) == 0


def test_locust_refuses_a_results_dir_that_holds_a_run(run_locust, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / schema.REQUESTS_FILE).write_text("earlier rows\n")
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        NOWHERE,
        *SHORT,
        "--results-dir",
        str(run),
        "--input-tokens",
        "8",
        "--output-tokens",
        "8",
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{run} already holds a run (requests.csv); choose another --results-dir or pass --overwrite" in proc.stderr
    assert (run / schema.REQUESTS_FILE).read_text() == "earlier rows\n"


def test_scenario_runner_refuses_an_output_folder_that_exists(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    proc = scenarios_cli("run", "--scenario", "smoke", "--out", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert (
        proc.stderr == f"error: {tmp_path} already exists and is not empty; choose another --out or pass --overwrite\n"
    )
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_analysis_refuses_csvs_it_cannot_read(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    header = ",".join(schema.REQUEST_COLUMNS).encode()
    (run / schema.REQUESTS_FILE).write_bytes(header + b"\n1,2,,,1,0,,,,,0,0,\xff\xfe,0,,1,w,chat\n")
    assert analysis_main([str(run), "--out", str(tmp_path / "out")]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {run / schema.REQUESTS_FILE}: not a readable CSV (not UTF-8 text at byte 0)\n"
    )
    (run / schema.REQUESTS_FILE).write_bytes(header + b"\n1,2,,,1,0,,,,,0,1,,200,,1,w,chat\n")
    (run / schema.LEVELS_FILE).write_text(",".join(schema.LEVEL_COLUMNS) + "\n1,2,3,4\n1,2,3,4,5\n")
    assert analysis_main([str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run / schema.LEVELS_FILE}: not a readable CSV (") and err.count("\n") == 1
