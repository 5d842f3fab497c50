"""Shared prefixes on purpose (--prefix-tokens): the server's prefix cache serves them, each row records the
cached tokens the server reported, and the report's hit rate from the rows agrees with the server's own counters."""

import json

import pytest

from vllm_stress.client.prompts import Workload

WORDS = [f"w{i}" for i in range(50)]


def test_prompts_share_one_of_the_group_prefixes_on_every_worker():
    first, second = (
        Workload(128, 16, words=WORDS, overhead=5, seed=seed, prefix_tokens=20, prefix_groups=2) for seed in (1, 2)
    )
    assert first.prefixes == second.prefixes and len(set(first.prefixes)) == 2  # the same groups on every worker
    for _ in range(20):
        words = first.next_request().text.split()
        assert len(words) == 128 - 5 and " ".join(words[:20]) in first.prefixes


def run(scenarios, tmp_path, name, *args):
    out = tmp_path / name
    assert (
        scenarios(
            [
                "run",
                "--scenario",
                "smoke",
                "--out",
                str(out),
                "--workers",
                "1",
                "--locust-arg=--levels=4",
                "--locust-arg=--step-time=auto",
                "--simulator-arg=--enable-prompt-tokens-details",
                *args,
            ]
        )
        == 0
    )
    return json.loads((out / "report" / "summary.json").read_text())["levels"][0]


def test_hit_rate_from_rows_agrees_with_the_server(scenarios, tmp_path):
    shared = run(scenarios, tmp_path, "shared", "--locust-arg=--prefix-tokens=96", "--locust-arg=--prefix-groups=2")
    random = run(scenarios, tmp_path, "random")
    assert shared["prefix_hit_rate"] > 0.6  # 96 of 128 prompt tokens, in whole 16-token blocks
    assert shared["prefix_hit_rate"] == pytest.approx(shared["server_prefix_hit_rate"], abs=0.05)
    assert random["prefix_hit_rate"] == 0 and random["server_prefix_hit_rate"] == pytest.approx(0, abs=0.01)
    assert shared["ttft_p50_s"] < random["ttft_p50_s"]  # the cached prefix is not prefilled again
