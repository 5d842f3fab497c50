"""Connection churn (docs/guides/stress.md, "Connection churn"): --connections against what the simulator counted
(vllm_stress_sim_connections_total) and logged (--request-log), and the pools that open, time and close connections."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections import Counter

import pandas as pd
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.harness import read_rows
from tests.helpers import NO_CANARIES, analyse, parsed_options, run_json
from vllm_stress.analysis.features import connection
from vllm_stress.client.pools import TimedClientPool, opened, opening
from vllm_stress.core.schema import ABORTED
from vllm_stress.simulator.api.requestlog import read_request_log

SIM = ["--profile", "cpu-tiny", "--set", "t_fixed=0.02"]  # ~0.2 s per 8-token answer: tens of rows, little CPU
RUN = ["--headless", "--only-summary", *NO_CANARIES, "-r", "100", "--input-tokens", "16", "--output-tokens", "8"]
RUN += ["--server-metrics-interval", "0"]  # no scrapes: the connections before the users' are the start-up checks'
# The start-up checks' connections, one each: GET /v1/models (its requests session), GET /version (run.json's
# server_version) and the chat workload's /tokenize calls (one Tokenizer session, kept alive between its calls).
STARTUP_CONNECTIONS = 3
OWN_SCRAPE = 1  # the test's GET /metrics counts the connection it came on
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
HANDSHAKE_DELAY_S = 0.2  # the TLS server below waits this long before its handshake


def accepted_connections(url: str) -> int:
    """The simulator's count of the connections it accepted, read from its /metrics."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    return int(families["vllm_stress_sim_connections"].samples[0].value)


def run(run_locust, url: str, tmp_path, *args: str, user: str = "chat"):
    proc = run_locust("-f", f"locustfiles/{user}.py", "-H", url, *RUN, *args, "--results-dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_rows(tmp_path / "run" / "requests.csv")


def test_per_request_opens_a_connection_for_each_request(run_locust, simulator, tmp_path):
    """Every request the server logged came on a connection of its own, and every row timed the connect."""
    log = tmp_path / "requests.jsonl"
    sim = simulator(*SIM, "--request-log", str(log))
    rows = run(run_locust, sim.url, tmp_path, "-u", "3", "-t", "3s", "--connections", "per-request")
    accepted = accepted_connections(sim.url)
    sim.stop()  # flushes the log
    records = read_request_log(str(log))
    assert len(rows) >= 10
    # every request that was not cut by the stop reached the server; one cut while its connection opened may not have
    cut = {row["request_id"] for row in rows if row["error"] == ABORTED}
    assert {row["request_id"] for row in rows} - cut <= set(records) <= {row["request_id"] for row in rows}
    assert len(records) <= accepted - STARTUP_CONNECTIONS - OWN_SCRAPE <= len(rows)  # a connection of its own each
    assert all(float(row["connect_s"]) > 0 for row in rows if row["request_id"] in records)
    assert run_json(tmp_path / "run")["connections"] == "per-request"
    summary = analyse(tmp_path / "run", tmp_path / "report")
    (level,) = summary["levels"]
    assert summary["connections"] == "per-request"
    assert 0 < level["connect_p50_s"] <= level["connect_p99_s"]
    assert level["connections_per_s"] > 0.9 * level["requests_per_s"]  # the window's aborted and failed open too
    assert "## Connection churn" in (tmp_path / "report" / "report.md").read_text()


def test_pooled_keeps_one_connection_per_user(run_locust, simulator, tmp_path):
    """Today's behaviour: each user opens one connection and keeps it; only its first request's row has connect_s."""
    log = tmp_path / "requests.jsonl"
    sim = simulator(*SIM, "--request-log", str(log))
    rows = run(run_locust, sim.url, tmp_path, "-u", "3", "-t", "3s")
    accepted = accepted_connections(sim.url)
    sim.stop()
    assert {row["request_id"] for row in rows} == set(read_request_log(str(log)))
    assert len(rows) >= 10
    assert accepted == 3 + STARTUP_CONNECTIONS + OWN_SCRAPE
    assert sum(1 for row in rows if row["connect_s"]) == 3
    assert run_json(tmp_path / "run")["connections"] == "pooled"


def test_per_session_opens_a_connection_per_conversation(run_locust, simulator, tmp_path):
    """The session user's conversations of 3 turns: one connection each, timed on the row of its first turn. The
    stop may cut a conversation's first turn before its connection is made: that row is Aborted, without connect_s,
    and the server may not have accepted its connection yet."""
    sim = simulator(*SIM)
    args = ["-u", "2", "-t", "3s", "--turns", "3", "--think-time", "0", "--connections", "per-session"]
    rows = run(run_locust, sim.url, tmp_path, *args, user="session")
    accepted = accepted_connections(sim.url)
    conversations = {row["session_id"] for row in rows}
    finished = [row for row in rows if row["error"] != ABORTED]
    connected = {row["session_id"] for row in rows if row["connect_s"]}
    assert len(conversations) >= 4 and {row["session_id"] for row in finished} <= connected <= conversations
    assert all(bool(row["connect_s"]) == (row["turn"] == "1") for row in finished)
    assert all(row["turn"] == "1" for row in rows if row["connect_s"])
    # the session user sizes its turns with a /tokenize session of its own at start-up
    base = STARTUP_CONNECTIONS + 1 + OWN_SCRAPE
    assert len(connected) + base <= accepted <= len(conversations) + base, (accepted, connected, conversations)


def test_per_session_gives_each_agent_task_its_own_connections(run_locust, simulator, tmp_path):
    """The built-in agent task (4 steps, a fan-out of 3 at the third): its first step opens a connection, the
    fan-out two more beside it, the rest reuse them; the next task opens its own. The stop lets the last task end."""
    sim = simulator(*SIM)
    # 6 s: two tasks begin even on a loaded machine (a task took over 3 s on one with load average 10)
    args = ["-u", "1", "-t", "6s", "--stop-timeout", "20", "--connections", "per-session"]
    rows = run(run_locust, sim.url, tmp_path, *args, user="agent")
    accepted = accepted_connections(sim.url)
    tasks = {row["task_id"] for row in rows}
    assert len(tasks) >= 2
    opened_by_task = Counter(row["task_id"] for row in rows if row["connect_s"])
    assert opened_by_task == dict.fromkeys(tasks, 3)
    assert accepted == 3 * len(tasks) + STARTUP_CONNECTIONS + OWN_SCRAPE


def test_an_accept_cost_caps_new_connections_and_the_http_layer_holds_few(run_locust, simulator, tmp_path):
    """The server's one event loop spends 200 ms on each new connection: at most 5 a second, so 4 users whose
    requests (0.2 s of engine time) each open one wait for their accept, and its HTTP layer holds fewer than 4."""
    sim = simulator(*SIM, "--accept-cost-ms", "200")
    args = ["-u", "4", "-t", "6s", "--connections", "per-request", "--server-metrics-interval", "1"]
    run(run_locust, sim.url, tmp_path, *args)
    (level,) = analyse(tmp_path / "run", tmp_path / "report")["levels"]
    assert level["connections_per_s"] <= 5 * 1.1
    assert level["server_http_held_mean"] < 0.9 * 4
    # the verdict names the HTTP layer's shortfall; which kind (HTTP-layer-bound, or client-bound when this loaded
    # machine's load generator lagged) is the rule's, checked below without a machine's health in it
    assert "vLLM's HTTP layer held" in level["bound"], level["bound"]


def test_the_sdk_user_runs_pooled_only(run_locust, tmp_path):
    """The SDK's HTTP client keeps its own connections: any other mode stops the run before it reaches a server."""
    args = ["-f", "locustfiles/sdk.py", "-H", "http://127.0.0.1:9", *RUN, "-u", "1", "-t", "2s"]
    proc = run_locust(*args, "--connections", "per-request", "--results-dir", str(tmp_path / "run"))
    assert proc.returncode == 2
    assert "--connections per-request: the SDK user's connections are its SDK's (pooled)" in proc.stderr


@pytest.mark.parametrize(
    ("connections_per_s", "verdict", "bound"),
    [
        (
            9.0,
            "gateway/frontend-bound (held 1 of 4)",
            ["HTTP-layer-bound (9.0 new connections/s; gateway/frontend-bound (held 1 of 4))"],
        ),
        (1.0, "gateway/frontend-bound (held 1 of 4)", None),  # pooled: few new connections, the verdict stands
        (9.0, "client-bound (CPU)", None),  # the load generators kept the requests out
    ],
)
def test_a_churning_level_whose_http_layer_held_few_is_http_layer_bound(connections_per_s, verdict, bound):
    levels = pd.DataFrame({"users": [4], "requests_per_s": [10.0], "connections_per_s": [connections_per_s]})
    verdicts = connection.bounds(levels.assign(bound=verdict))
    assert (None if verdicts is None else verdicts.tolist()) == bound


def test_the_connections_option_takes_its_three_modes():
    assert parsed_options().connections == "pooled"
    for mode in ("pooled", "per-request", "per-session"):
        assert parsed_options("--connections", mode).connections == mode
    with pytest.raises(SystemExit):
        parsed_options("--connections", "per-user")


def serve_keep_alive(server: socket.socket, accepted: list[int]) -> None:
    """Answer every request of every connection ``server`` accepts with a 2-byte body, the connection kept open."""
    while True:
        try:
            connection, _ = server.accept()
        except OSError:  # the test closed the listener
            return
        accepted.append(1)
        threading.Thread(target=answer_all, args=(connection,), daemon=True).start()


def answer_all(connection: socket.socket) -> None:
    """One response per request head (GET: no body), however the reads cut them."""
    pending = b""
    with connection:
        while data := connection.recv(65536):
            pending += data
            while b"\r\n\r\n" in pending:
                _head, pending = pending.split(b"\r\n\r\n", 1)
                connection.sendall(RESPONSE)


@pytest.mark.parametrize(("one_use", "connections"), [(False, 1), (True, 3)])
def test_a_pool_times_the_connections_it_opens_and_a_one_use_pool_keeps_none(one_use, connections):
    """Three requests in turn: a pool opens one connection and reuses it, a one-use pool opens one per request;
    ``opened()`` says how long the request's own connection took, None on a reused one."""
    accepted: list[int] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        threading.Thread(target=serve_keep_alive, args=(server, accepted), daemon=True).start()
        pool = TimedClientPool(one_use=one_use, network_timeout=10, connection_timeout=10)
        client = pool.get_client(f"http://127.0.0.1:{server.getsockname()[1]}/")
        times = []
        for _ in range(3):
            opening()
            response = client.get("/")
            assert response.read() == b"ok"
            response.release()
            times.append(opened())
        pool.close()
    assert len(accepted) == connections
    assert all(seconds is not None and seconds > 0 for seconds in times[:connections])
    assert times[connections:] == [None] * (3 - connections)


def serve_tls_late(server: socket.socket, context: ssl.SSLContext) -> None:
    """Accept one connection (the kernel has completed its TCP handshake already), wait HANDSHAKE_DELAY_S, then do
    the TLS handshake and answer one request."""
    connection, _ = server.accept()
    time.sleep(HANDSHAKE_DELAY_S)
    with context.wrap_socket(connection, server_side=True) as tls:
        while b"\r\n\r\n" not in tls.recv(65536):
            pass
        tls.sendall(RESPONSE)


def test_an_https_connection_is_timed_with_its_tls_handshake(tls_files):
    """To an https:// target the connect time holds the TLS handshake: a server that shakes hands 0.2 s after the
    TCP connect makes the request's connection take at least that."""
    cert, key = tls_files
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with socket.create_server(("127.0.0.1", 0)) as server:
        threading.Thread(target=serve_tls_late, args=(server, context), daemon=True).start()
        pool = TimedClientPool(ssl_options={"ca_certs": str(cert)}, network_timeout=10, connection_timeout=10)
        client = pool.get_client(f"https://127.0.0.1:{server.getsockname()[1]}/")
        opening()
        response = client.get("/")
        assert response.read() == b"ok"
        response.release()
        pool.close()
    seconds = opened()
    assert seconds is not None and seconds >= HANDSHAKE_DELAY_S
