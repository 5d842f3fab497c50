"""The numbers a capacity plan is signed off on, checked against exact answers: the cost per million tokens from a
synthetic run's level table; the KV-cache ceiling from vLLM's cache_config_info, and on the simulator with a small
KV cache against what the server recorded (docs/concepts/analysis.md, "Capacity planning")."""

import json

import numpy as np
import pandas as pd
import pytest

from tests.helpers import LEVELS, run_cli, small_run
from vllm_stress.analysis.capacity import kv_ceiling
from vllm_stress.analysis.figures.pareto import on_front, pareto_points, throughput_axis
from vllm_stress.analysis.io.synthetic import closed_loop_rows, write_run
from vllm_stress.core.numbers import dollars
from vllm_stress.master.serverscraper import cache_config


def hand_cost(tokens_per_s: float, price: float, gpus: int) -> float:
    """$ per million tokens, written out as the issue states it."""
    return price * gpus / (tokens_per_s * 3600) * 1e6


def test_cost_per_million_tokens_at_each_level_and_the_peak(tmp_path, capsys):
    run = small_run(tmp_path / "run")  # level 5: 5 users x 100 tokens / 5 s; level 10: 8 users (2,048-token prompts)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, run, "--out", out, "--gpus", "4", "--gpu-hour-price", "2.5")
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    levels = {level["users"]: level for level in summary["levels"]}
    assert levels[5]["output_tokens_per_s"] == pytest.approx(100.0) and levels[10]["total_tokens_per_s"] == (
        pytest.approx(8 * 2148 / 5)
    )
    for level in levels.values():
        assert level["usd_per_m_output_tokens"] == hand_cost(level["output_tokens_per_s"], 2.5, 4)  # exact
        assert level["usd_per_m_total_tokens"] == hand_cost(level["total_tokens_per_s"], 2.5, 4)
    assert levels[5]["usd_per_m_output_tokens"] == pytest.approx(2.5 * 4 / (100 * 3600) * 1e6)  # $27.78
    peak = summary["peak"]
    assert peak["users"] == 10 and summary["gpu_hour_price"] == 2.5
    assert peak["usd_per_m_output_tokens"] == levels[10]["usd_per_m_output_tokens"]
    assert peak["usd_per_m_total_tokens"] == levels[10]["usd_per_m_total_tokens"]
    report = (out / "report.md").read_text()
    assert f"{dollars(peak['usd_per_m_output_tokens'])} (4 GPUs at $2.50/h)" in report
    assert "$/M output tok" in report and dollars(levels[5]["usd_per_m_total_tokens"]) in report


def test_a_price_per_config_and_none_without_one(tmp_path, capsys):
    a, b = small_run(tmp_path / "a", model="a"), small_run(tmp_path / "b", model="b")
    code, _, err = run_cli(
        capsys, "--label", f"a={a}", "--label", f"b={b}", "--out", tmp_path / "out", "--gpus", "2",
        "--gpu-hour-price", "a=3",
    )  # fmt: skip
    assert code == 0, err
    configs = json.loads((tmp_path / "out" / "summary.json").read_text())["configs"]
    assert configs["a"]["peak"]["usd_per_m_output_tokens"] == pytest.approx(hand_cost(160.0, 3.0, 2))
    assert "usd_per_m_output_tokens" not in configs["b"]["levels"][0] and "gpu_hour_price" not in configs["b"]
    assert "- (no --gpu-hour-price)" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-hour-price", "2"], "--gpu-hour-price: give the GPUs of m too (--gpus)"),
        (["--gpus", "2", "--gpu-hour-price", "free"], "--gpu-hour-price: 'free' is not USD or NAME=USD"),
        (["--gpus", "2", "--gpu-hour-price", "0"], "--gpu-hour-price: '0' is not USD"),
    ],
)
def test_a_price_without_gpus_or_not_a_price_is_refused(tmp_path, capsys, args, message):
    code, _, err = run_cli(capsys, small_run(tmp_path / "run"), "--out", tmp_path / "out", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


CACHE_INFO = (
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",gpu_memory_utilization="0.9",'
    'num_gpu_blocks="BLOCKS"} 1.0\n'
    'vllm:num_requests_running{engine="0"} 0.0\n'
)


def test_the_kv_cache_is_read_from_vllms_cache_config_info():
    assert cache_config(CACHE_INFO.replace("BLOCKS", "2048")) == {"block_size": 16, "num_gpu_blocks": 2048}
    assert cache_config(CACHE_INFO.replace("BLOCKS", "None")) is None  # vLLM before its cache is sized
    assert cache_config('vllm:num_requests_running{engine="0"} 0.0\n') is None


def test_compute_bound_when_the_cache_holds_more_than_the_saturation_point():
    levels = pd.DataFrame(
        {"users": [8, 16, 32], "server_preemptions": [0.0, 0.0, 3.0], "server_kv_cache_usage_mean": [0.1, 0.25, 0.5]}
    )
    meta = {
        "server_cache_config": {"block_size": 16, "num_gpu_blocks": 1001},
        "input_tokens": 100,
        "output_tokens": 28,
    }
    kv = kv_ceiling([{}, meta], levels, saturation_users=16)
    assert kv["sequences"] == 1000 // 8 and kv["preemption_users"] == 32  # 128 tokens: 8 blocks of 16
    assert kv["verdict"] == "compute-bound: saturates at 16 users with the cache 25.0 % full"
    assert kv_ceiling([meta], levels, saturation_users=32)["memory_bound"]  # preemptions from the saturation point
    assert kv_ceiling([{"input_tokens": 1, "output_tokens": 1}], levels, 16) is None


def test_a_small_kv_cache_saturates_where_the_server_preempts(scenarios, tmp_path):
    """41 blocks of 16 tokens (40 usable), sequences of 32 + 128 tokens (10 blocks): the cache holds 4 of them. Up to 4
    users nothing is preempted; from 8 users the scheduler admits short prompts that then outgrow the cache."""
    out = tmp_path / "kv"
    args = ["--levels=2,4,8,16", "--input-tokens=32", "--output-tokens=128"]
    sim = ["--num-gpu-blocks-override=41", "--max-model-len=256"]
    run = ["run", "--scenario", "smoke", "--out", str(out), "--workers", "1"]
    assert scenarios([*run, *(f"--locust-arg={a}" for a in args), *(f"--simulator-arg={a}" for a in sim)]) == 0
    meta = json.loads((out / "run-1" / "run.json").read_text())
    assert meta["server_cache_config"] == {"block_size": 16, "num_gpu_blocks": 41}
    kv = json.loads((out / "report" / "summary.json").read_text())["kv_cache"]
    assert kv["sequences"] == 4 and kv["tokens_per_sequence"] == 160
    server = pd.read_csv(out / "run-1" / "server_metrics.csv")
    levels = pd.read_csv(out / "run-1" / "levels.csv")
    preempted = [
        users
        for users, start, end in zip(levels["users"], levels["hold_start"], levels["hold_end"], strict=True)
        if server.loc[server["time"] <= end, "preemptions"].max()
        > server.loc[server["time"] <= start, "preemptions"].max()
    ]
    assert kv["preemption_users"] == min(preempted) and min(preempted) > kv["sequences"]  # the cache held 2 and 4
    assert kv["memory_bound"] and kv["verdict"].startswith(f"memory-bound: saturates at {kv['saturation_users']} users")
    assert kv["verdict"].endswith("the KV cache holds 4 sequences of 160 tokens")
    assert "memory-bound: saturates at" in (out / "report" / "report.md").read_text()
    levels = json.loads((out / "report" / "summary.json").read_text())["levels"]
    assert not any(level["bound"].startswith("batch-bound") for level in levels)


def simulated_saturation(scenarios, out, levels: str, simulator: list[str]) -> dict:
    """A smoke run at ``levels`` of 32 + 32 tokens against the simulator started with ``simulator``: its summary."""
    args = [f"--levels={levels}", "--input-tokens=32", "--output-tokens=32", "--step-time=6"]
    run = ["run", "--scenario", "smoke", "--out", str(out), "--workers", "1"]
    assert scenarios([*run, *(f"--locust-arg={a}" for a in args), *(f"--simulator-arg={a}" for a in simulator)]) == 0
    return json.loads((out / "report" / "summary.json").read_text())


def test_a_batch_capped_by_max_num_seqs_is_batch_bound(scenarios, tmp_path):
    """--max-num-seqs 4 under 8 and 16 users: the engine runs 4 with the rest waiting, its KV cache nearly empty."""
    summary = simulated_saturation(scenarios, tmp_path / "batch", "8,16", ["--max-num-seqs=4", "--set=t_per_seq=0.002"])
    server = pd.read_csv(tmp_path / "batch" / "run-1" / "server_metrics.csv")
    assert server["running"].max() == 4 and server["waiting"].max() > 0  # what the simulator recorded
    (config,) = summary["configs"].values()
    kv = config["kv_cache"]
    assert kv["max_num_seqs"] == 4 and kv["batch"]["ceiling"] == 4 and not kv["memory_bound"]
    assert kv["verdict"].startswith(f"batch-bound: max_num_seqs 4 reached: saturates at {kv['saturation_users']} users")
    assert [level["bound"].split(" (")[0] for level in config["levels"]] == ["batch-bound: max_num_seqs 4 reached"] * 2


def test_a_step_time_that_grows_with_the_batch_is_compute_bound(scenarios, tmp_path):
    """10 ms of step time per running sequence: the throughput is flat from 2 users while every user runs (the batch
    grows with them, nothing waits, the cache has room): compute, not the batch."""
    summary = simulated_saturation(scenarios, tmp_path / "compute", "2,4,8", ["--set=t_per_seq=0.01"])
    server = pd.read_csv(tmp_path / "compute" / "run-1" / "server_metrics.csv")
    assert server["running"].max() == 8 and server["preemptions"].max() == 0
    (config,) = summary["configs"].values()
    kv = config["kv_cache"]
    assert kv["max_num_seqs"] is None and kv["batch"] is None and kv["memory_bound"] is False
    assert kv["verdict"].startswith(f"compute-bound: saturates at {kv['saturation_users']} users")
    assert not any(level["bound"].startswith(("batch-bound", "memory-bound")) for level in config["levels"])


def two_level_run(folder, e2e_by_level):
    """A synthetic run of levels 5 and 10 (LEVELS: 50 s holds), every request of a level lasting its e2e: output tok/s
    per user 1 / TPOT = 99 / (0.9 e2e), output tok/s users x 100 / e2e."""
    parts = [
        closed_loop_rows(users, ramp_start, hold_end, e2e_by_level[users], completion_tokens=100)
        for users, ramp_start, _, hold_end in LEVELS
    ]
    return write_run(folder, pd.concat(parts), LEVELS, meta={"model": folder.name})


def test_the_pareto_front_is_the_levels_no_other_beats(tmp_path, capsys, figures):
    a = two_level_run(tmp_path / "a", {5: 2.5, 10: 5.0})  # (44, 200) and (22, 200): beaten by a/5
    b = two_level_run(tmp_path / "b", {5: 5.0, 10: 4.0})  # (22, 100): beaten; (27.5, 250): the most tok/s
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "--label", f"a={a}", "--label", f"b={b}", "--gpus", "2", "--slo", "tpot=30ms", "--out", out
    )
    assert code == 0, err
    configs = json.loads((out / "summary.json").read_text())["configs"]
    points = pareto_points(configs)
    assert sorted(zip(points["label"], points["users"], points["front"], strict=True)) == [
        ("a", 5, True), ("a", 10, False), ("b", 5, False), ("b", 10, True)
    ]  # fmt: skip
    front = points[points["front"]].set_index("label")
    assert front.loc["a", "per_user"] == pytest.approx(99 / 2.25, rel=1e-4)  # tpot_s written to 6 decimals
    assert front.loc["b", "per_gpu"] == pytest.approx(125)
    assert throughput_axis(points) == "output tok/s per GPU"
    assert throughput_axis(points.assign(gpus_given=False)) == "output tok/s per deployment (no --gpus)"
    report = (out / "report.md").read_text()
    assert "| a | 5 | 44.0 | 100.0 | yes | yes |" in report and "| b | 10 | 27.5 | 125.0 | yes | no |" in report
    assert (out / "pareto.png").stat().st_size > 0


def test_the_front_keeps_ties_and_drops_the_dominated():
    x, y = np.array([1.0, 2.0, 2.0, 3.0, 0.5]), np.array([5.0, 4.0, 4.0, 1.0, 5.0])
    assert on_front(x, y).tolist() == [True, True, True, True, False]
