"""A fleet through a router (--server-metrics-url): three simulator replicas behind Debian's nginx, each replica's
/metrics scraped on its own while the load goes to nginx; the analysis sums them and tells how evenly nginx spread
the requests (round robin, then weights 3:1:1); and multi-turn sessions pinned by nginx's hash of their
X-Session-Id header, against round robin, each replica's prefix-cache hit rate telling them apart."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pandas as pd
import pytest
import requests

from tests.helpers import SHORT, SLOW_SIM, analyse, served_as_rows, server_completed, wait_until
from vllm_stress.core import schema
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.api.requestlog import read_request_log

NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")  # the Makefile's
RAMP = [
    "--levels",
    "6,12",
    "--step-time",
    "5",
    "--warmup",
    "1",
    "--ramp-time",
    "0.5",
    "--server-metrics-interval",
    "0.25",  # ~16 looks at each replica's running requests in a level's 4 s window
]


def nginx_config(folder: Path, port: int, replicas: list[str], weights: list[int], balance: str = "") -> str:
    """A router on 127.0.0.1:``port`` to ``replicas`` (host:port) with ``weights`` and the ``balance`` directive
    (default round robin), its files in ``folder``."""
    servers = "".join(f"server {replica} weight={weight};" for replica, weight in zip(replicas, weights, strict=True))
    servers = f"{balance} {servers}"
    user = "user root;" if os.geteuid() == 0 else ""  # its workers then read the temp folders made here
    return f"""daemon off; {user} worker_processes 1; pid {folder}/nginx.pid; error_log {folder}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log {folder}/access.log; client_body_temp_path {folder}/body; proxy_temp_path {folder}/proxy;
  fastcgi_temp_path {folder}/fastcgi; uwsgi_temp_path {folder}/uwsgi; scgi_temp_path {folder}/scgi;
  upstream replicas {{ {servers} keepalive 32; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://replicas; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off;
    }}
  }}
}}
"""


@pytest.fixture
def nginx(processes, tmp_path):
    """``nginx(replicas, weights, balance="")``: Debian's nginx routing a loopback port to the replicas' URLs, its config and
    logs in tmp_path, stopped by its PID after the test (SIGTERM: its master stops its workers; ``processes`` kills
    what still runs); returns its URL. Skips without nginx."""
    if not os.path.exists(NGINX):
        pytest.skip(f"{NGINX} is missing: make nginx")
    started = []

    def start(replicas: list[str], weights: list[int], balance: str = "") -> str:
        folder, port = tmp_path / f"nginx{len(started)}", free_port()
        folder.mkdir()
        hosts = [url.removeprefix("http://").rstrip("/") for url in replicas]
        (folder / "nginx.conf").write_text(nginx_config(folder, port, hosts, weights, balance))
        command = [NGINX, "-p", folder, "-e", folder / "error.log", "-c", folder / "nginx.conf"]
        started.append(processes(command, folder / "out.log"))
        url = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: answers(url), timeout=20), (folder / "error.log").read_text()[-2000:]
        return url

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=10)


def answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/v1/models", timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


def fleet_run(simulator, nginx, run_locust, tmp_path: Path, weights: list[int]) -> tuple[dict, pd.DataFrame, dict]:
    """A two-level run through nginx to three replicas with ``weights``: the report's summary, the request rows and
    {replica host:port: the requests it finished during the run (its own vllm:request_success_total)}."""
    replicas = [simulator(*SLOW_SIM).url for _ in weights]
    router = nginx(replicas, weights)
    before = [server_completed(url) for url in replicas]
    out = tmp_path / "run"
    scraped = [f"--server-metrics-url={url}/metrics" for url in replicas]
    locustfile = "locustfiles/chat.py,scenarios/shape.py"
    args = ["-f", locustfile, "-H", router, *SHORT, *RAMP, "--results-dir", out, "--csv", out / "locust", *scraped]
    proc = run_locust(*map(str, args), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    finished = {
        url.removeprefix("http://"): server_completed(url) - start for url, start in zip(replicas, before, strict=True)
    }
    summary = analyse(out, tmp_path / "report")
    summary["report_md"] = (tmp_path / "report" / schema.REPORT_MD).read_text()
    return summary, pd.read_csv(out / schema.REQUESTS_FILE), finished


def test_round_robin_spreads_the_requests_evenly(simulator, nginx, run_locust, tmp_path):
    summary, rows, finished = fleet_run(simulator, nginx, run_locust, tmp_path, [1, 1, 1])
    print("round robin: finished per replica", finished, "rows", len(rows))
    # every request that ended before the stop was finished by a replica, and no replica finished one without a row;
    # a stream the stop cut (Aborted) is counted by its replica once it sees the disconnect, maybe after the scrape
    ended = int((rows["error"] != schema.ABORTED).sum())
    assert 0 < ended <= sum(finished.values()) <= len(rows)
    for level in summary["levels"]:
        print("level", level["users"], "imbalance", level["replica_imbalance"])
        assert level["replica_imbalance"] <= 1.3  # max / mean: 1 at best
        assert "router-bound" not in level["bound"]
    assert len(summary["replicas"]) == 3 * len(summary["levels"])


def test_a_heavy_weight_shows_as_the_replica_holding_most(simulator, nginx, run_locust, tmp_path):
    summary, rows, finished = fleet_run(simulator, nginx, run_locust, tmp_path, [3, 1, 1])
    heavy = max(summary["replicas"], key=lambda row: row["request_share"])["replica"]
    assert heavy == next(iter(finished)) == max(finished, key=finished.__getitem__)  # the replica of weight 3
    print("weights 3:1:1: finished per replica", finished, "rows", len(rows))
    for level in summary["levels"]:
        shares = {row["replica"]: row["request_share"] for row in summary["replicas"] if row["users"] == level["users"]}
        print("level", level["users"], "imbalance", level["replica_imbalance"], "shares", shares)
        assert shares[heavy] == pytest.approx(0.6, abs=0.08)
        # 1.8 (0.6 of the requests, each as long, on one of three replicas) as the sampled gauges see it: over 1.3,
        # round robin's bound above, with room for the samples' spread (1.41 seen once at 8 looks)
        assert level["replica_imbalance"] > 1.4
        assert level["bound"].startswith(f"router-bound: replica {heavy} held ")
    assert heavy in summary["report_md"] and "Replica imbalance" in summary["report_md"]


SESSIONS = ["--turns", "4", "--think-time", "0", "--input-tokens", "96", "--turn-tokens", "16", "--output-tokens", "8"]


def session_run(simulator, nginx, run_locust, tmp_path: Path, balance: str) -> tuple[dict, dict[str, set[str]]]:
    """Four-turn sessions through nginx (``balance``) to three replicas, each writing its request log (stopped after
    the run): the report's summary and {session id: the replicas (host:port) that served its turns, by their logs}."""
    logs = [tmp_path / f"{balance.split()[0] if balance else 'rr'}-{index}.jsonl" for index in range(3)]
    simulators = [simulator(*SLOW_SIM, "--request-log", str(log)) for log in logs]
    replicas = [sim.url for sim in simulators]
    router = nginx(replicas, [1, 1, 1], balance)
    out = tmp_path / f"sessions-{len(balance)}"
    scraped = [f"--server-metrics-url={url}/metrics" for url in replicas]
    # 5 users, not a multiple of the 3 replicas: users in step would otherwise meet the same replica at each turn
    level = ["--levels", "5", "--step-time", "4", "--warmup", "1", "--ramp-time", "0.5"]
    args = ["-f", "locustfiles/session.py,scenarios/shape.py", "-H", router, *SHORT, *SESSIONS, *level]
    args += ["--server-metrics-interval", "0.5", "--results-dir", out, "--csv", out / "locust", *scraped]
    proc = run_locust(*map(str, args), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for sim in simulators:
        sim.stop()  # its request log is flushed as it stops
    served_by = {
        request_id: url.removeprefix("http://")
        for url, log in zip(replicas, logs, strict=True)
        for request_id in read_request_log(str(log))
    }
    rows = pd.read_csv(out / schema.REQUESTS_FILE, dtype={"session_id": str})
    rows = rows[rows["ok"] == 1]  # a turn cut by the stop may have no log record
    sessions: dict[str, set[str]] = {}
    for session, request_id in zip(rows["session_id"], rows["request_id"], strict=True):
        sessions.setdefault(session, set()).add(served_by[request_id])
    return analyse(out, tmp_path / f"report-{len(balance)}"), sessions


def test_a_session_hash_keeps_each_conversation_on_one_replica(simulator, nginx, run_locust, tmp_path):
    """nginx's ``hash $http_x_session_id consistent`` sends every turn of a session to one replica, whose prefix
    cache then holds the conversation so far: each replica's hit rate is high; round robin scatters the turns and
    the hit rates fall (the replicas' own counters, vllm:prefix_cache_hits / queries)."""
    pinned, pinned_sessions = session_run(simulator, nginx, run_locust, tmp_path, "hash $http_x_session_id consistent;")
    spread, spread_sessions = session_run(simulator, nginx, run_locust, tmp_path, "")
    pinned_rates = {row["replica"]: row["prefix_cache_hit_rate"] for row in pinned["replicas"]}
    spread_rates = {row["replica"]: row["prefix_cache_hit_rate"] for row in spread["replicas"]}
    print("hashed: hit rate per replica", pinned_rates, "round robin:", spread_rates)
    print("sessions on one replica:", sum(len(r) == 1 for r in pinned_sessions.values()), "of", len(pinned_sessions))
    assert len(pinned_sessions) >= 5 and all(len(served) == 1 for served in pinned_sessions.values())
    assert any(len(served) > 1 for served in spread_sessions.values())
    # a replica's own rate rests on the few turns it served in the 3 s hold (0.36 once, where 0.65-0.69 is usual):
    # the replicas' mean holds the claim
    pinned_mean = statistics.mean(pinned_rates.values())
    assert len(pinned_rates) == 3 and pinned_mean > 0.5
    assert max(spread_rates.values()) < pinned_mean - 0.15


def test_a_host_naming_two_replicas_spreads_the_requests_itself(simulator, run_locust, tmp_path):
    """No router: -H names two simulators; the users deal their requests out in turn, each row names its replica,
    and each replica's own count of requests (vllm:request_success_total) is its rows'."""
    replicas = [simulator(*SLOW_SIM).url for _ in range(2)]
    out = tmp_path / "run"
    args = ["-f", "locustfiles/chat.py", "-H", ",".join(replicas), *SHORT, "-u", "4", "-r", "4", "-t", "3s"]
    proc = run_locust(*map(str, [*args, "--results-dir", out]), timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = pd.read_csv(out / schema.REQUESTS_FILE)
    per_replica = rows.groupby("replica").size().to_dict()
    print("rows per replica", per_replica)
    expected = {url.removeprefix("http://"): per_replica.get(url.removeprefix("http://")) for url in replicas}
    by_replica = {replica: group.fillna("").to_dict("records") for replica, group in rows.groupby("replica")}
    for url in replicas:
        replica = url.removeprefix("http://")
        assert wait_until(lambda: served_as_rows(server_completed(url), by_replica[replica])), replica  # noqa: B023
    assert abs(per_replica[min(per_replica)] - per_replica[max(per_replica)]) <= 4  # in turn: nearly even
    scraped = pd.read_csv(out / schema.SERVER_METRICS_FILE)
    assert set(scraped["replica"]) == set(expected)  # each replica's /metrics, without --server-metrics-url
