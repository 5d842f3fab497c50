"""The bound rule (vllm_stress.core.bound): the live dashboard (vllm_stress.webui.bound) reads the same files with
the same rule as the report, and the rule's verdicts on known server and client figures."""

import math

import numpy as np
import pandas as pd
import pytest

from vllm_stress.analysis import stats
from vllm_stress.analysis.levels import client_health_max, server_load
from vllm_stress.core.bound import batch_ceiling, launch_max_num_seqs, level_bound, router_note
from vllm_stress.core.schema import (
    CLIENT_HEALTH_COLUMNS,
    CLIENT_HEALTH_FILE,
    LEVEL_COLUMNS,
    LEVELS_FILE,
    SERVER_METRICS_COLUMNS,
    SERVER_METRICS_FILE,
)
from vllm_stress.webui.bound import SETTLE_S, hold_bound

T0 = 1.7e9
HOLD = (T0 + 1100.0, T0 + 1200.0)


def write_files(folder, waiting_share: float, cpu: float, read_behind_ms: float = 2.0, lag_ms: float = 35.0) -> None:
    """A hold of 20 users whose server held each request 1 s, ``waiting_share`` of it queued (50 end every 10 s:
    5 in its engine by Little's law), and two load generators, one at ``cpu`` %, its event loop ``lag_ms`` late and
    reading ``read_behind_ms`` late (p99) just inside the hold."""
    folder.mkdir()
    pd.DataFrame([(20, T0 + 1090, *HOLD)], columns=LEVEL_COLUMNS).to_csv(folder / LEVELS_FILE, index=False)
    scrapes = np.arange(T0 + 1110, T0 + 1231, 10.0)
    server = pd.DataFrame({column: 0.0 for column in SERVER_METRICS_COLUMNS}, index=range(len(scrapes)))
    server = server.assign(
        time=scrapes,
        users=20,
        e2e_count=50,
        e2e_sum_s=50.0,
        queue_sum_s=50 * waiting_share,
        frontend_cpu_s=0.5 * np.arange(len(scrapes)),
        http_count=np.nan,
        http_sum_s=np.nan,
    )
    server.to_csv(folder / SERVER_METRICS_FILE, index=False)
    health = [(T0 + t, 20, w, 40.0, 1.0, 2.0, 300.0) for t in (1100, 1130, 1230) for w in ("w1", "w2")]
    health[3] = (T0 + 1130, 20, "w2", cpu, lag_ms, read_behind_ms, 300.0)
    pd.DataFrame(health, columns=CLIENT_HEALTH_COLUMNS).to_csv(folder / CLIENT_HEALTH_FILE, index=False)


def report_bound(folder, e2e_p50_s: float = math.nan) -> str:
    """The report's path: pandas tables, the analysis' per-window figures, stats.bounds."""
    windows = pd.DataFrame({"users": [20], "start": [HOLD[0]], "end": [HOLD[1]]})
    level = server_load(pd.read_csv(folder / SERVER_METRICS_FILE), windows).reset_index()
    health = pd.read_csv(folder / CLIENT_HEALTH_FILE)
    level["client_cpu_max_percent"] = client_health_max(health, windows, "cpu_percent")
    level["client_loop_lag_max_ms"] = client_health_max(health, windows, "loop_lag_ms")
    level["client_read_behind_p99_ms"] = client_health_max(health, windows, "read_behind_p99_ms")
    level["e2e_p50_s"] = e2e_p50_s
    return stats.bounds(level).iloc[0]


@pytest.mark.parametrize(
    ("waiting_share", "cpu", "expected"),
    [
        (
            0.5,
            40.0,
            "server-bound: waiting requests (a load generator's event loop 35 ms late: client timings inflated)",
        ),
        (
            0.0,
            97.0,
            "client-bound (a load generator at 97 % CPU; a load generator's event loop 35 ms late; "
            "the server's engine held 5 of 20; no HTTP-layer metrics to tell which)",
        ),
    ],
)
def test_the_live_bound_is_the_reports(tmp_path, waiting_share, cpu, expected):
    folder = tmp_path / "run"
    write_files(folder, waiting_share, cpu)
    assert hold_bound(folder, {"users": 20}, now=HOLD[1] + SETTLE_S - 1) is None  # samples may still come
    live = hold_bound(folder, {"users": 20}, now=HOLD[1] + SETTLE_S)
    assert live == report_bound(folder) == expected


@pytest.mark.parametrize(
    ("read_behind_ms", "expected"),
    [
        (
            150.0,
            "client-bound (a load generator read its chunks 150 ms late (p99, 15% of the e2e p50): its users sent "
            "their next requests as late; the server's engine held 5 of 20; no HTTP-layer metrics to tell which)",
        ),
        (
            30.0,
            "client/gateway- or frontend-bound (the server's engine held 5 of 20; no HTTP-layer metrics to tell which)",
        ),
    ],
)
def test_the_live_level_flags_late_reads_as_the_report_does(tmp_path, read_behind_ms, expected):
    """The dashboard's level carries the hold's e2e p50 (its verdict's); 30 ms is under 5 % of 1 s."""
    folder = tmp_path / "run"
    write_files(folder, 0.0, 40.0, read_behind_ms, lag_ms=1.0)
    live = hold_bound(folder, {"users": 20, "e2e_p50_s": 1.0}, now=HOLD[1] + SETTLE_S)
    assert live == report_bound(folder, e2e_p50_s=1.0) == expected


def test_a_level_without_its_hold_or_files_waits_then_says_nothing(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    assert hold_bound(folder, {"users": 20}, now=T0) is None
    pd.DataFrame([(20, T0, T0 + 1, T0 + 2)], columns=LEVEL_COLUMNS).to_csv(folder / LEVELS_FILE, index=False)
    assert hold_bound(folder, {"users": 20}, now=T0 + 60) == ""


def test_frontend_and_gateway_bounds_need_the_http_layer_to_tell_apart():
    base = {"users": 100, "server_waiting_mean": 0.0}
    assert level_bound(base | {"server_in_system_mean": 40.0, "server_http_held_mean": 98.0}) == (
        "frontend-bound (vLLM's HTTP layer held 98 of 100, its engine 40)"
    )
    assert level_bound(base | {"server_in_system_mean": 40.0, "server_http_held_mean": 41.0}) == (
        "client/gateway-bound (vLLM's HTTP layer held 41 of 100)"
    )
    assert level_bound(base | {"server_in_system_mean": 99.0, "server_http_held_mean": 99.5}) == ""
    open_loop = base | {"server_in_system_mean": 3.0, "schedule_lag_p99_s": 0.2}  # the users are only a pool
    assert level_bound(open_loop) == ""
    assert level_bound({"users": 10, "server_frontend_cpu_percent": math.nan}) == ""


def replicas(*rows: tuple[float, float, float]) -> list[dict]:
    """Replica level rows a:1, b:1, ... from (request share, running mean, waiting mean)."""
    return [
        {"replica": f"{chr(97 + i)}:1", "request_share": share, "running_mean": running, "waiting_mean": waiting}
        for i, (share, running, waiting) in enumerate(rows)
    ]


def test_a_replica_far_over_its_share_makes_the_level_router_bound():
    held = replicas((0.6, 6, 0), (0.2, 2, 0), (0.2, 2, 0))
    assert router_note(held) == "router-bound: replica a:1 held 60 % of the requests"
    assert router_note(replicas((0.4, 4, 0), (0.3, 3, 0), (0.3, 3, 0))) == ""  # under 1.5 times its third
    assert router_note(replicas((1.0, 4, 9))) == "" and router_note([]) == ""  # one server: no router to blame


def test_a_queue_on_one_replica_while_another_idles_is_the_routers():
    queued = replicas((0.4, 8, 3.5), (0.35, 3, 0), (0.25, 6, 0))  # shares near even: only the queue says it
    assert router_note(queued) == (
        "queue on one replica while others idle: replica a:1 had 3.5 requests waiting while replica b:1 ran 3.0 with none"
    )
    assert router_note(replicas((0.4, 8, 3.5), (0.3, 8, 2), (0.3, 7, 0))) == ""  # the others are busy too
    assert router_note(replicas((0.4, 8, 0.5), (0.3, 1, 0), (0.3, 1, 0))) == ""  # no queue to speak of


def test_a_shortfall_inside_the_windows_margin_accuses_no_one():
    """The demo's 100 users: vLLM's HTTP layer "held 89 of 100" by Little's law over a window of about two scrapes
    whose requests lived 4 s: known to 40 % at best, so no verdict; the same figure from a 400 s window is judged,
    and names the client only when its own health does not say it kept its requests out."""
    level = {"users": 100, "server_waiting_mean": 0.0, "server_in_system_mean": 89.0, "server_http_held_mean": 89.0}
    assert level_bound(level | {"server_load_margin": 4.0 / 10.0}) == ""
    judged = level | {"server_load_margin": 4.0 / 400.0}
    assert level_bound(judged) == "client/gateway-bound (vLLM's HTTP layer held 89 ± 1 of 100)"
    healthy = judged | {"concurrency_mean": 99.4, "client_cpu_max_percent": 24.0, "client_loop_lag_max_ms": 1.9}
    assert level_bound(healthy) == (
        "gateway/frontend-bound (vLLM's HTTP layer held 89 ± 1 of 100; the load generators at 24 % CPU, 1.9 ms loop lag)"
    )
    assert level_bound(healthy | {"concurrency_mean": math.nan}).startswith("gateway/frontend-bound")  # the live tab's
    assert level_bound(healthy | {"concurrency_mean": 80.0}).startswith("client/gateway-bound")  # they held back


def test_waiting_requests_name_the_batch_cap_or_the_cache_when_their_figures_show_it():
    queued = {"users": 200, "server_in_system_mean": 198.0, "server_waiting_mean": 71.0, "server_load_margin": 0.1}
    capped = queued | {"server_running_mean": 127.0, "server_kv_cache_usage_mean": 0.069, "max_num_seqs": 128}
    assert (
        level_bound(capped) == "batch-bound: max_num_seqs 128 reached (127 running, 71 waiting, the KV cache 7 % full)"
    )
    full = capped | {"server_kv_cache_usage_mean": 0.97, "server_preemptions": 12.0}
    assert level_bound(full) == "memory-bound: waiting requests (the KV cache 97 % full; 12 preemptions)"
    assert level_bound(capped | {"max_num_seqs": 1024}) == "server-bound: waiting requests"  # its batch had room
    assert level_bound(capped | {"max_num_seqs": math.nan}) == "server-bound: waiting requests"  # unknown cap
    assert level_bound(queued | {"server_waiting_mean": 5.0, "server_load_margin": 0.9}) == ""  # 5 ± 4.5: unsure


def saturated(running: list[float], waiting: list[float], usage: float = 0.07) -> list[dict]:
    return [
        {"users": users, "server_running_mean": r, "server_waiting_mean": w, "server_kv_cache_usage_mean": usage}
        for users, r, w in zip((100, 200, 500, 1000), running, waiting, strict=True)
    ]


def test_a_batch_flat_at_its_cap_with_requests_waiting_and_room_in_the_cache_is_batch_bound():
    demo = saturated([98.0, 127.0, 126.4, 127.2], [0.0, 71.0, 374.0, 874.0])
    assert batch_ceiling(demo, 200, 128) == {
        "ceiling": 128.0,
        "running_min": 126.4,
        "running_max": 127.2,
        "waiting_min": 71.0,
        "waiting_max": 874.0,
    }
    assert batch_ceiling(demo, 200, None)["ceiling"] == 127.2  # without the launch settings: the plateau
    assert batch_ceiling(demo, 200, 1024) is None  # a cap it did not reach: compute
    growing = saturated([98.0, 190.0, 480.0, 950.0], [0.0, 2.0, 10.0, 40.0])  # every user runs, the steps slow down
    assert batch_ceiling(growing, 200, None) is None and batch_ceiling(growing, 200, 1024) is None
    assert batch_ceiling(saturated([98.0, 127.0, 126.4, 127.2], [0.0, 71.0, 374.0, 874.0], 0.95), 200, 128) is None
    assert batch_ceiling(saturated([98.0, 127.0, 126.4, 127.2], [0.0, 0.0, 0.0, 0.0]), 200, 128) is None  # no queue
    assert batch_ceiling(demo[-1:], 1000, None) is None  # one level is no plateau


def test_max_num_seqs_from_the_launch_command():
    def launched(*command: str) -> dict:
        return {"server_launch": {"kind": "simulator", "command": ["python", "-m", "simulator", *command]}}

    assert launch_max_num_seqs(launched("--profile", "h100-llama-3.1-8b", "--max-num-seqs", "128")) == 128
    assert launch_max_num_seqs(launched("--max-num-seqs=64")) == 64
    assert launch_max_num_seqs(launched("--set", "tensor_parallel_size=8", "--set", "max_num_seqs=32")) == 32
    assert launch_max_num_seqs(launched("--profile", "cpu-tiny")) is None
    assert launch_max_num_seqs(launched("--max-num-seqs", "many")) is None
    assert launch_max_num_seqs({"server_launch": None}) is None and launch_max_num_seqs({}) is None
