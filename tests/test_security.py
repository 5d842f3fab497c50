"""The API key goes only into the bearer header; TLS is verified unless --insecure; everything binds to loopback."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests

from benchmarks.harness import read_rows
from tests.helpers import LOCUST, NO_CANARIES, REPO, SHORT, wait_until
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.cli import build_parser

KEY = f"sk-vllm-stress-canary-{secrets.token_hex(6)}"  # this run's own: other runs on the machine hold theirs


def cmdlines_with_key(exclude: set[int]) -> list[str]:
    """The command lines of this machine's processes that hold KEY (the server under test excepted)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if KEY.encode() in cmdline and int(pid) not in exclude:
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def listening(pid: int) -> set[str]:
    """The addresses a process listens on."""
    conns = psutil.Process(pid).net_connections(kind="inet")
    return {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}


def test_api_key_only_in_the_bearer_header_of_a_full_scenario(simulator, processes, tmp_path):
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.02", "--api-key", KEY)  # the server's own flag
    assert requests.get(sim.url + "/v1/models", timeout=5).status_code == 401  # so an accepted request carried it
    out = tmp_path / "out"
    logs = tmp_path / "runner.log"
    runner = processes(
        [
            sys.executable,
            "-m",
            "scenarios",
            "run",
            "--scenario",
            "smoke",
            "--target",
            sim.url,
            "--workers",
            "1",
            "--out",
            out,
            "--locust-arg=--levels=2",
            "--locust-arg=--step-time=2",
        ],
        logs,
        env={"OPENAI_API_KEY": KEY},
    )
    leaks, binds = [], {}
    while runner.poll() is None:  # while the master and the worker run
        leaks += cmdlines_with_key(exclude={sim.proc.pid})
        for child in psutil.Process(runner.pid).children(recursive=True):
            try:
                binds.setdefault(child.pid, set()).update(listening(child.pid))
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.5)
    assert runner.wait() == 0, logs.read_text()[-3000:]
    assert not leaks
    assert len(binds) == 2 and set().union(*binds.values()) == {"127.0.0.1"}  # the master's port; the worker has none
    rows = read_rows(out / "run-1" / "requests.csv")
    done = [r for r in rows if r["error"] != "Aborted"]
    assert done and all(r["ok"] == "1" for r in done)  # the worker authenticated
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"run.json", "requests.csv", "locust_stats.csv", "report.md", "summary.json"} <= {p.name for p in files}
    assert [p for p in files if KEY.encode() in p.read_bytes()] == []
    assert KEY not in logs.read_text()


def test_api_key_is_not_in_the_web_ui(simulator, processes, tmp_path):
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.02", "--api-key", KEY)
    port = free_port()
    locust = processes(
        [
            *LOCUST,
            "-f",
            "locustfiles/chat.py",
            "-H",
            sim.url,
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--autostart",
            "--autoquit",
            "1",
            "-u",
            "1",
            "-t",
            "4s",
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
            "--results-dir",
            tmp_path / "run",
        ],
        tmp_path / "locust.log",
        env={"OPENAI_API_KEY": KEY},
    )
    try:
        pages = {}
        requests_csv = tmp_path / "run" / "requests.csv"
        assert wait_until(lambda: requests_csv.exists() and len(read_rows(requests_csv)) > 0, timeout=20)
        for path in ("/", "/stats/requests", "/llm/requests.csv", "/llm/start"):
            pages[path] = requests.get(f"http://127.0.0.1:{port}{path}", timeout=5).text
        assert listening(locust.pid) == {"127.0.0.1"}
    finally:
        locust.wait(timeout=20)
    assert "--api-key-file" in pages["/llm/start"]  # the start form lists the suite's options ...
    assert '"extra_options": {}' in pages["/"]  # (Locust's form none of them)
    assert all(KEY not in text for text in pages.values())  # ... but not the key's value
    assert KEY not in (tmp_path / "locust.log").read_text()


def test_the_start_form_sends_no_file_of_the_master_away(fault_server, processes, tmp_path):
    """A POST to /swarm that names a path option (by name or by flag), or an option of Locust's own, is refused with
    one line and changes nothing: the server it names gets no request, and a run started next from the form sends
    no file's content. (Before: ``api_key_file=FILE`` and ``host=`` a server of the sender's choosing made the master
    send FILE's content there as ``Authorization: Bearer ...``.)"""
    secret = tmp_path / "secret.txt"
    secret.write_text("master-secret-4f1c9a")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    processes(
        [*LOCUST, "-f", "locustfiles/chat.py", "--web-host", "127.0.0.1", "--web-port", str(port)]
        + [*SHORT[:4], *NO_CANARIES, "--results-dir", tmp_path / "run"],
        tmp_path / "locust.log",
        env={"OPENAI_API_KEY": ""},
    )
    assert wait_until(lambda: page_up(url), timeout=30), (tmp_path / "locust.log").read_text()[-2000:]
    steal = {"host": fault_server.url + "/steal", "user_count": "1", "spawn_rate": "1"}
    for field, message in (
        ("api_key_file", "--api-key-file names a file on the master"),
        ("--api-key-file", "--api-key-file names a file on the master"),
        ("--dataset", "--dataset names a file on the master"),
        ("csv_prefix", "the start form has no field 'csv_prefix'"),
    ):
        answer = requests.post(url + "/swarm", data={**steal, field: str(secret)}, timeout=10).json()
        assert not answer["success"] and answer["message"].startswith(message), answer
        assert "\n" not in answer["message"]
    assert requests.get(url + "/stats/requests", timeout=10).json()["state"] == "ready"  # nothing started
    started = requests.post(url + "/swarm", data={**steal, "host": fault_server.url + "/fault/ok"}, timeout=10)
    assert started.json()["success"], started.text
    assert wait_until(lambda: fault_server.chat_requests("/fault/ok") > 0, timeout=30)  # the run that could leak
    requests.post(url + "/stop", timeout=10)
    assert fault_server.every and not [path for path, _ in fault_server.every if path.startswith("/steal")]
    assert not [h for _, h in fault_server.every if "master-secret" in str(dict(h))]  # no file's content sent
    assert not (tmp_path / "run" / "requests.csv").read_text().count("master-secret")


def page_up(url: str) -> bool:
    try:
        return requests.get(url + "/llm/start", timeout=5).status_code == 200
    except requests.ConnectionError:
        return False


def test_tls_is_verified_unless_insecure(run_locust, tls_server, tmp_path):
    server, cert = tls_server
    url = server.url + "/fault/ok"
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        url,
        "-u",
        "1",
        "-t",
        "3s",
        *SHORT,
        "--results-dir",
        str(tmp_path / "refused"),
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        f"cannot reach the server: GET {url}/v1/models: TLS error: certificate verify failed: self-signed "
        "certificate (a self-signed test server needs --insecure)" in proc.stderr
    )
    # trusted for the start-up calls (requests honours REQUESTS_CA_BUNDLE), the users still verify: every request fails
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        url,
        "-u",
        "1",
        "-t",
        "2s",
        *SHORT,
        "--results-dir",
        str(tmp_path / "verified"),
        env={"REQUESTS_CA_BUNDLE": str(cert)},
        timeout=60,
    )
    rows = read_rows(tmp_path / "verified" / "requests.csv")
    assert proc.returncode == 1 and rows and {r["error"] for r in rows} == {"TLSError"}
    assert server.chat_requests("/fault/ok") == 0  # no request got past the handshake
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        url,
        "-u",
        "1",
        "-t",
        "2s",
        *SHORT,
        "--insecure",
        "--stop-timeout",
        "5",
        "--results-dir",
        str(tmp_path / "insecure"),
        timeout=60,
    )
    rows = read_rows(tmp_path / "insecure" / "requests.csv")
    assert proc.returncode == 0 and rows and all(r["ok"] == "1" for r in rows)
    assert server.chat_requests("/fault/ok") == len(rows)
    proc = run_locust(
        "-f",
        "locustfiles/sdk.py",
        "-H",
        url,
        "-u",
        "1",
        "-t",
        "2s",
        *SHORT,
        "--insecure",
        "--stop-timeout",
        "5",
        "--results-dir",
        str(tmp_path / "sdk"),
        timeout=60,
    )
    sdk_rows = read_rows(tmp_path / "sdk" / "requests.csv")
    assert proc.returncode == 0 and sdk_rows and all(r["ok"] == "1" for r in sdk_rows), proc.stderr[-2000:]


def test_servers_bind_to_loopback_by_default(simulator):
    assert build_parser().parse_args([]).host == "127.0.0.1"
    sim = simulator("--profile", "cpu-tiny")
    assert listening(sim.proc.pid) == {"127.0.0.1"}


def test_runner_refuses_a_key_on_a_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "scenarios", "run", "--scenario", "smoke", f"--locust-arg=--api-key={KEY}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: pass the API key as OPENAI_API_KEY")
