"""Disaggregated prefill/decode: the simulator's KV link, connector and proxy request, the engine taking a KV
connector's tokens, replica roles, the per-level P/D fields and the prefill-/transfer-/decode-bound rule, and one
short run of a 2x2 simulator fleet with a slow link that the report names transfer-bound."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.helpers import analyse
from vllm_stress.analysis.features.disagg import pd_levels
from vllm_stress.analysis.io.load import Run
from vllm_stress.core import schema
from vllm_stress.core.pdbound import pd_note, pd_notes
from vllm_stress.core.roles import split_role
from vllm_stress.master.serverscraper import ServerScraper, parse_metrics
from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.sequence import Sequence
from vllm_stress.simulator.model.profiles import load_profile
from vllm_stress.simulator.pd.disagg import PD_READY_PREFIX, KvLink, NixlMetrics, kv_bytes_per_token, parse_layout
from vllm_stress.simulator.pd.pdproxy import prefill_body


def test_the_layout_names_prefill_then_decode_instances():
    assert parse_layout("2x2") == (2, 2)
    assert parse_layout(" 1X3 ") == (1, 3)
    for bad in ("2", "0x2", "2x0", "2x2x2", "ax2"):
        with pytest.raises(ValueError, match="PREFILLxDECODE"):
            parse_layout(bad)


def test_the_link_serves_one_transfer_at_a_time_then_adds_its_latency():
    link = KvLink(bandwidth=1e6, latency=0.01)  # 1 MB/s
    assert link.transfer(0.0, 500_000) == pytest.approx(0.51)  # 0.5 s on the wire + 10 ms
    assert link.transfer(0.0, 1_000_000) == pytest.approx(1.51)  # queued behind the first: wire free at 0.5 s
    assert link.transfer(5.0, 1_000_000) == pytest.approx(6.01)  # an idle link starts at once


def test_a_token_moves_every_ranks_kv():
    tiny = load_profile("cpu-tiny")
    assert kv_bytes_per_token(tiny) == 2 * 8 * 4 * 64 * 2  # K and V x layers x heads x head_dim x 2 bytes, TP 1
    deepseek = load_profile("mi325x-deepseek-v3.2-tp8")
    assert kv_bytes_per_token(deepseek) == 8 * 2 * 61 * 1 * 288 * 2  # MLA's latent on each of the 8 ranks


def test_the_prefill_request_asks_one_token_for_a_remote_decode():
    body = {"model": "m", "max_tokens": 64, "max_completion_tokens": 64, "stream": True, "min_tokens": 8}
    body["stream_options"] = {"include_usage": True}
    prefill = prefill_body(body)
    assert prefill["max_tokens"] == prefill["max_completion_tokens"] == 1
    assert prefill["stream"] is False and "stream_options" not in prefill and "min_tokens" not in prefill
    assert prefill["kv_transfer_params"]["do_remote_decode"] is True
    assert body["max_tokens"] == 64 and body["min_tokens"] == 8  # the decode instance gets the request as sent


def test_the_engine_schedules_a_connectors_tokens_as_computed():
    profile = load_profile("cpu-tiny", {"jitter": 0.0})
    local, remote = Engine(profile), Engine(profile)
    plain = Sequence(1024, 2)
    pulled = Sequence(1024, 2)
    pulled.external_computed = 1023  # vLLM recomputes the last prompt token
    local.add_request(plain, arrival=0.0)
    remote.add_request(pulled, arrival=0.0)
    first = remote.step()
    assert first.outputs == [pulled] and pulled.num_output == 1  # one step: the last token, and the first output
    assert remote.last_num_scheduled_tokens == 1
    assert remote.prefix_cache_hits == 0 and pulled.num_cached_tokens == 1023
    local.step()
    assert local.last_num_scheduled_tokens == 1024 and first.duration < local.clock


def test_the_decode_instances_series_carry_vllms_names():
    metrics = NixlMetrics("m")
    metrics.xfer_time.observe(0.2)
    metrics.bytes.observe(4_000_000)
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry).decode()
    for name in ("vllm:nixl_xfer_time_seconds_bucket", "vllm:nixl_bytes_transferred_sum"):
        assert name in text
    assert 'vllm:nixl_num_failed_transfers_total{engine="0",model_name="m"} 0.0' in text
    row = dict(zip(schema.SERVER_METRICS_COLUMNS, ServerScraper.row(parse_metrics(text), None, 1.0, 1), strict=True))
    assert row["kv_transfer_bytes"] == 4_000_000


def test_a_role_prefixes_the_metrics_url():
    assert split_role("prefill=http://p:8000/metrics") == ("prefill", "http://p:8000/metrics")
    assert split_role("decode = http://d:8000/metrics") == ("decode", "http://d:8000/metrics")
    assert split_role("http://r:8000/metrics?a=b") == ("both", "http://r:8000/metrics?a=b")


def level(users: int, prefill: float, transfer: float, decode: float, **fields: float) -> dict:
    ttft = prefill + transfer + decode
    return {
        "users": users,
        "ttft_client_mean_s": ttft,
        "ttft_prefill_s": prefill,
        "ttft_transfer_s": transfer,
        "ttft_first_decode_s": decode,
        **fields,
    }


def test_the_stage_that_grew_most_names_the_bound():
    lowest = level(1, 0.05, 0.30, 0.03)
    assert pd_note(lowest, lowest) == ""
    assert pd_note(level(8, 0.06, 0.90, 0.04), lowest).startswith("transfer-bound: its part of TTFT 0.900 s, 3.0×")
    assert pd_note(level(8, 0.40, 0.31, 0.03), lowest).startswith("prefill-bound")
    assert pd_note(level(8, 0.05, 0.31, 0.09), lowest) == ""  # grew 3x, but by 6 s/100 of a 0.45 s TTFT
    assert pd_note(level(8, 0.05, 0.31, 0.03, decode_waiting_mean=3.0), lowest).startswith("decode-bound")
    levels = [level(8, 0.06, 0.90, 0.04), lowest]
    assert pd_notes(levels)[0].startswith("transfer-bound") and pd_notes(levels)[1] == ""
    assert pd_notes([{"users": 1, "ttft_client_mean_s": math.nan}]) == [""]


def scrape(time: float, replica: str, **cells: float) -> dict:
    return {"time": time, "replica": replica, **cells}


def test_each_levels_fleet_by_role_from_the_replicas_rows():
    rows = [  # one prefill (p) and one decode (d) instance scraped at 0 (before the window), 1 and 2
        scrape(0, "p", running=0, waiting=0, e2e_count=0, e2e_sum_s=0, http_count=0, http_sum_s=0),
        scrape(1, "p", running=2, waiting=1, e2e_count=4, e2e_sum_s=0.4, http_count=4, http_sum_s=0.5),
        scrape(2, "p", running=4, waiting=3, e2e_count=6, e2e_sum_s=0.8, http_count=6, http_sum_s=1.0),
        scrape(0, "d", running=0, waiting=0, ttft_count=0, ttft_sum_s=0, kv_transfer_count=0, kv_transfer_sum_s=0),
        scrape(1, "d", running=6, waiting=0, ttft_count=5, ttft_sum_s=2.0, kv_transfer_count=5, kv_transfer_sum_s=1.5),
        scrape(2, "d", running=8, waiting=0, ttft_count=5, ttft_sum_s=2.0, kv_transfer_count=5, kv_transfer_sum_s=1.5),
    ]
    bytes_total = {0: 0.0, 1: 2e9, 2: 5e9}
    for row in rows:
        row["kv_transfer_bytes"] = bytes_total[row["time"]] if row["replica"] == "d" else math.nan
    run = Run(Path("x"), pd.DataFrame(), {"server_replicas": pd.DataFrame(rows)}, {"replica_roles": {"p": "prefill"}})
    run.meta["replica_roles"]["d"] = "decode"
    windows = pd.DataFrame({"users": [4], "start": [0.5], "end": [2.5]})
    measured = pd.DataFrame({"users": [4, 4], "ttft_s": [0.6, 0.8]})
    without_http = pd.DataFrame(rows).assign(http_count=math.nan, http_sum_s=math.nan)
    engine_only = Run(Path("x"), pd.DataFrame(), {"server_replicas": without_http}, run.meta)
    assert pd_levels(engine_only, windows, measured).loc[4, "ttft_prefill_s"] == pytest.approx(0.12)  # e2e: 1.2 / 10
    fields = pd_levels(run, windows, measured).loc[4]
    assert fields["prefill_running_mean"] == 3 and fields["prefill_waiting_mean"] == 2
    assert fields["decode_running_mean"] == 7 and fields["decode_waiting_mean"] == 0
    assert fields["kv_transfers"] == 10 and fields["ttft_transfer_s"] == pytest.approx(0.3)
    assert fields["kv_transfer_gb"] == pytest.approx(5.0) and fields["kv_transfer_gbps"] == pytest.approx(20.0)
    assert fields["ttft_prefill_s"] == pytest.approx(0.15)  # HTTP: 1.5 s over 10 prefills
    assert fields["ttft_first_decode_s"] == pytest.approx(0.4 - 0.3)
    assert fields["ttft_client_mean_s"] == pytest.approx(0.7)
    assert fields["ttft_split_ratio"] == pytest.approx((0.15 + 0.3 + 0.1) / 0.7)


def test_a_fleet_without_roles_has_no_pd_fields():
    run = Run(Path("x"), pd.DataFrame(), {}, {})
    windows = pd.DataFrame({"users": [4], "start": [0.0], "end": [1.0]})
    assert pd_levels(run, windows, pd.DataFrame({"users": [4], "ttft_s": [0.1]})).isna().all().all()


# The whole run: 2 prefill + 2 decode instances, a 0.1 Gbit/s link (4 MiB prompts: 0.34 s a transfer), a slow step
# so that few requests run; at 1 user the links idle, at 8 each has about four transfers to serve.
PD_SIM = ["--pd", "2x2", "--kv-transfer-gbps", "0.1", "--profile", "cpu-tiny", "--set", "t_fixed=0.02"]
PD_RUN = ["--input-tokens", "512", "--output-tokens", "4", "--headless", "--only-summary", "--levels", "1,8"]
PD_RAMP = ["--step-time", "6", "--warmup", "1", "--ramp-time", "0.5", "--server-metrics-interval", "0.5"]


def test_a_slow_kv_link_makes_the_top_level_transfer_bound(simulator, run_locust, tmp_path):
    sim = simulator(*PD_SIM)
    (line,) = [line for line in sim.output if line.startswith(PD_READY_PREFIX)]
    urls = dict(re.findall(r"(prefill|decode)=(\S+)", line))
    scraped = [f"--server-metrics-url={role}={url}/metrics" for role in urls for url in urls[role].split(",")]
    out = tmp_path / "run"
    locustfile = "locustfiles/chat.py,scenarios/shape.py"
    args = ["-f", locustfile, "-H", sim.url, *PD_RUN, *PD_RAMP, "--results-dir", out, "--csv", out / "locust"]
    proc = run_locust(*map(str, args + scraped), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / schema.RUN_FILE).read_text())["replica_roles"] == {
        url.removeprefix("http://"): role for role in urls for url in urls[role].split(",")
    }
    summary = analyse(out, tmp_path / "report")
    low, high = summary["levels"]
    for level in summary["levels"]:
        print(level["users"], {key: level[key] for key in level if key.startswith(("ttft_", "kv_"))}, level["bound"])
        assert level["kv_transfers"] > 0 and level["kv_transfer_gb"] > 0
        assert abs(level["ttft_split_ratio"] - 1) <= 0.1  # the parts account for the client's TTFT
    assert not low["bound"].startswith(("transfer-bound", "prefill-bound", "decode-bound"))
    assert high["bound"].startswith("transfer-bound: ")
    assert high["ttft_transfer_s"] >= 2 * low["ttft_transfer_s"]
    assert "Disaggregated prefill/decode" in (tmp_path / "report" / schema.REPORT_MD).read_text()
