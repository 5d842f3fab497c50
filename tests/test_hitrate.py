"""A target prefix-cache hit rate (--prefix-hit-rate): prompts share whole KV blocks of their group's prefix, so the
server's own counters (vllm:prefix_cache_hits / queries, per level) measure the target."""

import json

import pytest

from vllm_stress.client.hitrate import SharedBlocks
from vllm_stress.client.prompts import Workload

WORDS = [f"w{i}" for i in range(50)]


def test_shared_tokens_are_whole_blocks_whose_sum_follows_the_rate():
    shared = SharedBlocks(0.9, block_size=16, head=4, tail=4)
    lengths = [256, 300, 128, 511] * 25
    given = [shared.shared_tokens(tokens) for tokens in lengths]
    assert all(tokens % 16 == 0 and tokens <= length - 5 for tokens, length in zip(given, lengths, strict=True))
    assert sum(given) / sum(lengths) == pytest.approx(0.9, abs=16 / sum(lengths))
    assert len(set(given[::4])) == 2  # 230.4 tokens of 256: 14 or 15 blocks, the rounding carried on


def test_a_rate_out_of_reach_is_held_at_the_template_or_the_last_block():
    assert SharedBlocks(0.0, 16, head=20, tail=4).shared_tokens(128) == 16  # the template's full block
    assert SharedBlocks(0.95, 16, head=4, tail=4).shared_tokens(64) == 48  # the last token's block is computed
    assert not SharedBlocks(0.95, 16, head=4, tail=4).reachable(64)


def test_every_worker_builds_the_same_prefix_of_a_group():
    plan = dict(words=WORDS, overhead=8, prefix_groups=2)
    first = Workload(256, 16, seed=1, shared=SharedBlocks(0.5, 16, head=4, tail=4), **plan)
    second = Workload(512, 16, seed=2, shared=SharedBlocks(0.9, 16, head=4, tail=4), **plan)
    for _ in range(10):  # the second grows its groups' prefixes further first: the words agree all the same
        spec = second.next_request()
        assert spec.shared_prefix_tokens is not None and spec.prefix_group is not None
        assert (
            spec.text.split()[: spec.shared_prefix_tokens - 4]
            == second.prefix_of(spec.prefix_group, 500)[: spec.shared_prefix_tokens - 4]
        )
    spec = first.next_request()
    assert spec.shared_prefix_tokens == 128 and len(spec.text.split()) == 256 - 8
    assert first.prefix_of(0, 124) == second.prefix_of(0, 124)


# the block size is the server's, read at test start: 32 tokens is not the default's 16, and blocks shared by 16s
# would leave the server's hits short of the target (0.3 of 256 tokens: 76.8, between 64 and 96 but not 80)
@pytest.mark.parametrize(("target", "groups", "block_size"), [(0.25, 1, 16), (0.3, 2, 32), (0.9, 1, 16)])
def test_the_servers_counters_measure_the_target(scenarios, tmp_path, target, groups, block_size):
    out = tmp_path / "run"
    argv = ["run", "--scenario", "smoke", "--out", str(out), "--workers", "1", "--locust-arg=--levels=3,6"]
    argv += [f"--simulator-arg=--block-size={block_size}"]
    argv += ["--locust-arg=--input-tokens=256", f"--locust-arg=--prefix-hit-rate={target}"]
    assert scenarios([*argv, f"--locust-arg=--prefix-groups={groups}"]) == 0
    levels = json.loads((out / "report" / "summary.json").read_text())["levels"]
    assert [level["users"] for level in levels] == [3, 6]
    for level in levels:  # the simulator's vllm:prefix_cache_hits / queries gained in the level's window
        assert level["server_prefix_hit_rate"] == pytest.approx(target, abs=0.02)
        assert level["prefix_hit_target"] == pytest.approx(target, abs=0.01)
    report = (out / "report" / "report.md").read_text()
    assert "Prefix-cache hit rate against its target" in report
