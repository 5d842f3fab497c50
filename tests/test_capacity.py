"""The numbers a capacity plan is signed off on, checked against exact answers: the cost per million tokens from a
synthetic run's level table (docs/concepts/analysis.md, "Capacity planning")."""

import json

import pytest

from tests.helpers import run_cli, small_run
from vllm_stress.core.numbers import dollars


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
