"""A long-context level on the simulator (scenarios/configs/long-context-128k.conf): 128,000-token prompts, exact by
the server's usage, and the prefill the server reports against what the profile's constants give for it
(docs/concepts/long-context.md); a chunked prefill in the server's engine steps."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from tests.helpers import NO_CANARIES, analyse
from vllm_stress.simulator.model.profiles import load_profile

PROMPT_TOKENS = 128_000
TIME_SCALE = 20  # engine seconds per wall second: a prefill of 12 engine seconds takes 0.6 s of the test's time


def roofline_prefill_s(tokens: int) -> float:
    """One request's prefill of ``tokens`` alone on the profile's GPU, compute-bound (checked: its bytes take
    milliseconds): 2 FLOPs per parameter per token, and causal attention's 4 x layers x query width FLOPs per
    (query, key) pair, N^2 / 2 pairs for N tokens however they are chunked; at the profile's peak FLOPs x MFU, plus
    the fixed cost of each of the chunks max_num_batched_tokens cuts it into."""
    profile = load_profile("h100-llama-3.1-8b")
    flops = 2 * profile.params_active * tokens + 4 * profile.layers * profile.q_width * tokens**2 / 2
    chunks = math.ceil(tokens / profile.max_num_batched_tokens)
    return flops / (profile.flops * profile.mfu) + chunks * (profile.t_fixed + profile.t_per_seq)


def test_a_128k_level_prefills_at_the_rate_the_profile_gives(scenarios, tmp_path):
    out = tmp_path / "long"
    args = ["run", "--scenario", "long-context-128k", "--out", str(out), "--workers", "1", "--levels", "1"]
    args += [f"--simulator-arg=--time-scale={TIME_SCALE}", "--locust-arg=--server-metrics-interval=1"]
    assert scenarios(args) == 0
    rows = pd.read_csv(out / "run-1" / "requests.csv")
    profile_rows = rows[rows["canary"].isna() & rows["ok"].astype(bool)]
    assert len(profile_rows) >= 3 and (profile_rows["prompt_tokens"] == PROMPT_TOKENS).all()  # exact, by usage
    assert (profile_rows["cached_tokens"].fillna(0) < 16).all()  # random words: at most the template's partial block
    [level] = json.loads((out / "report" / "summary.json").read_text())["levels"]
    # the server's own prefill time (engine seconds) of a 128k prompt: the profile's roofline, within its step jitter
    expected_s = roofline_prefill_s(PROMPT_TOKENS)
    assert level["server_prefill_mean_s"] == pytest.approx(expected_s, rel=0.03), (level, expected_s)
    assert level["prefill_tokens_per_s_per_request"] == pytest.approx(PROMPT_TOKENS / expected_s, rel=0.03)
    # one user prefills one prompt at a time: the throughput (wall seconds) is that speed, less the decode between
    share = level["prefill_tokens_per_s"] / TIME_SCALE / level["prefill_tokens_per_s_per_request"]
    assert 0.5 < share < 1.0, level
    report = (out / "report" / "report.md").read_text()
    assert "## Long prompts: prefill (long-context-128k)" in report and "| Prefill tok/s per request |" in report
    assert "the server prefilled at most" in report


def test_engine_steps_show_a_chunked_prefill(run_locust, simulator, tmp_path):
    """One user, 2,048-token prompts, 2-token answers, a step budget of 256: each request is 8 prefill steps of 256
    tokens and one decode step, so the level's steps average 2,049 / 9 = 228 tokens (1,025 unchunked), as the
    server's own vllm:iteration_tokens_total counts them."""
    sim = simulator("--profile", "cpu-tiny", "--max-num-batched-tokens", "256")
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/chat.py,scenarios/shape.py", "-H", sim.url, "--levels", "1", "--step-time", "6"),
        *("--warmup", "1", "--input-tokens", "2048", "--output-tokens", "2", "--server-metrics-interval", "0.5"),
        *("--headless", "--only-summary", "--results-dir", str(out), *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [level] = analyse(out, tmp_path / "report")["levels"]
    print(f"{level['engine_steps_per_s']:.1f} steps/s of {level['step_tokens_mean']:.1f} tokens")
    assert level["step_tokens_mean"] == pytest.approx(2049 / 9, rel=0.05)
    assert level["engine_steps_per_s"] == pytest.approx(9 * level["requests_per_s"], rel=0.15)
