"""A fleet through a router (--server-metrics-url): three simulator replicas behind Debian's nginx, each replica's
/metrics scraped on its own while the load goes to nginx; the analysis sums them and tells how evenly nginx spread
the requests (round robin, then weights 3:1:1)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
import requests

from tests.helpers import SHORT, SLOW_SIM, analyse, server_completed, wait_until
from vllm_stress.core import schema
from vllm_stress.scenarios.runner import free_port

NGINX = "/usr/sbin/nginx"
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
    "0.5",
]


def nginx_config(folder: Path, port: int, replicas: list[str], weights: list[int]) -> str:
    """A router on 127.0.0.1:``port`` to ``replicas`` (host:port) with ``weights``, its files in ``folder``."""
    servers = "".join(f"server {replica} weight={weight};" for replica, weight in zip(replicas, weights, strict=True))
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
    """``nginx(replicas, weights)``: Debian's nginx routing a loopback port to the replicas' URLs, its config and
    logs in tmp_path, stopped by its PID after the test (SIGTERM: its master stops its workers; ``processes`` kills
    what still runs); returns its URL. Skips without nginx."""
    if not os.path.exists(NGINX):
        pytest.skip(f"{NGINX} is missing (make nginx, or Debian: apt-get install -y nginx)")
    started = []

    def start(replicas: list[str], weights: list[int]) -> str:
        folder, port = tmp_path / "nginx", free_port()
        folder.mkdir()
        hosts = [url.removeprefix("http://").rstrip("/") for url in replicas]
        (folder / "nginx.conf").write_text(nginx_config(folder, port, hosts, weights))
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
    assert sum(finished.values()) == len(rows) > 0
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
        assert level["replica_imbalance"] > 1.5
        assert level["bound"].startswith(f"router-bound: replica {heavy} held ")
    assert heavy in summary["report_md"] and "Replica imbalance" in summary["report_md"]
