"""The simulator's CPU tier of the KV cache in virtual time: its capacity from --kv-offloading-size, every computed
block stored there, a prefix the GPU evicted loaded back (its copy time in the step) instead of recomputed, LRU order
and vLLM's external prefix-cache counters; the report's KV-capacity verdict from per-level hit rates; and vLLM's
KV-cache residency histograms (--kv-cache-metrics): each followed block's lifetime, idle time and reuse gaps."""

import json
import random

import pandas as pd
import pytest
import requests

from benchmarks.harness import metric_samples
from vllm_stress.analysis.features.prefix import EXTERNAL, GPU, kv_capacity_verdict
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.api.connectormetrics import ConnectorMetrics
from vllm_stress.simulator.api.metrics import KV_CACHE_RESIDENCY_BUCKETS, EngineMetrics
from vllm_stress.simulator.cli import main as simulator_main
from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.kvcache import HostTier, KVCache, num_cpu_blocks, prompt_block_hashes
from vllm_stress.simulator.engine.residency import Eviction, Residency
from vllm_stress.simulator.engine.sequence import Sequence
from vllm_stress.simulator.engine.steptime import kv_bytes_per_token_per_rank
from vllm_stress.simulator.model.profiles import load_profile

BLOCK_GIB = 16 * 8192 / 2**30  # one 16-token block of cpu-tiny's KV (8 layers x 4 KV heads x 64 x 2 x 2 bytes)


def tiny(cpu_blocks=0, **overrides):
    return load_profile(
        "cpu-tiny",
        {
            "jitter": 0.0,
            "max_model_len": 512,
            "num_gpu_blocks_override": 33,
            "kv_offloading_size": cpu_blocks * BLOCK_GIB,
        }
        | overrides,
    )


def prompt(seed, count=100):
    tokens = random.Random(seed).choices(range(128000), k=count)
    return Sequence(count, 1, block_hashes=prompt_block_hashes(tokens, 16))


def served(engine, seq):
    """Run ``seq`` alone on an idle engine; the (tokens scheduled, duration) of its first step."""
    engine.add_request(seq)
    first = None
    while engine.has_work:
        result = engine.step()
        first = first or (engine.last_num_scheduled_tokens, result.duration)
    return first


def test_the_tier_holds_the_blocks_its_size_buys():
    assert num_cpu_blocks(tiny(100)) == 100
    assert num_cpu_blocks(tiny(100, tensor_parallel_size=2)) == 100  # half the size per rank, half a block's bytes
    assert num_cpu_blocks(tiny(100, tensor_parallel_size=8)) == 50  # 4 KV heads on 8 ranks: one head each
    assert Engine(tiny()).kv.host is None
    assert Engine(tiny(100, enable_prefix_caching=False)).kv.host is None  # offloads only what the cache can hit


def test_a_prefix_the_gpu_evicted_is_loaded_back_not_recomputed():
    engine = Engine(tiny(100))  # 32 usable GPU blocks, 100 on the host
    served(engine, prompt(1))  # 7 blocks, its 6 full ones stored on the host as they are computed
    assert served(engine, prompt(2, 511))[0] == 511  # 32 blocks: the GPU evicts the first prompt's
    again = prompt(1)
    tokens, duration = served(engine, again)
    assert tokens == 100 - 96 and (again.num_cached_tokens, again.num_external_tokens) == (96, 96)
    onload = 96 * kv_bytes_per_token_per_rank(tiny()) / 25e9
    compute = engine.steptime.ideal(4, 4 * (96 + 2), 100, 1)
    assert duration == pytest.approx(compute + onload)
    assert (engine.prefix_cache_queries, engine.prefix_cache_hits) == (711, 0)
    assert (engine.external_prefix_cache_queries, engine.external_prefix_cache_hits) == (711, 96)


def test_without_a_tier_the_evicted_prefix_is_recomputed():
    engine = Engine(tiny())
    for seq in (prompt(1), prompt(2, 511)):
        served(engine, seq)
    again = prompt(1)
    assert served(engine, again)[0] == 100 and again.num_cached_tokens == 0
    assert (engine.external_prefix_cache_queries, engine.external_prefix_cache_hits) == (0, 0)


def test_a_gpu_hit_is_no_external_query():
    engine = Engine(tiny(100))
    served(engine, prompt(3))
    again = prompt(3)
    assert served(engine, again)[0] == 4 and again.num_external_tokens == 0
    assert (engine.prefix_cache_hits, engine.external_prefix_cache_queries) == (96, 100 + 4)


def test_the_metrics_count_a_cpu_tier_hit_as_external_from_the_host():
    engine = Engine(tiny(100))
    metrics = EngineMetrics(engine, "m", {})
    for seq in (prompt(1), prompt(2, 511), prompt(1)):
        engine.add_request(seq)
        while engine.has_work:
            metrics.observe_step(engine.step())
    samples = {(s.name, s.labels.get("source")): s.value for family in metrics.collect() for s in family.samples}
    by_source = {key[1]: value for key, value in samples.items() if key[0] == "vllm:prompt_tokens_by_source_total"}
    assert by_source == {"local_compute": 100 + 511 + 4, "local_cache_hit": 0, "external_kv_transfer": 96}
    assert samples["vllm:prompt_tokens_cached_by_source_total", "host"] == 96
    assert samples["vllm:prompt_tokens_cached_by_source_total", "device"] == 0
    transfers = {
        (s.name, s.labels["transfer_type"]): s.value
        for family in metrics.collect()
        if family.name.startswith("vllm:kv_offload_total")
        for s in family.samples
    }
    stored = (6 + 31) * 16 * 8192  # every full block computed, once: the first prompt's 6, the long one's 31
    assert transfers["vllm:kv_offload_total_bytes_total", "GPU_to_CPU"] == stored
    assert transfers["vllm:kv_offload_total_bytes_total", "CPU_to_GPU"] == 96 * 8192
    assert transfers["vllm:kv_offload_total_time_total", "CPU_to_GPU"] == pytest.approx(96 * 8192 / 25e9)
    assert not any(
        family.name.startswith("vllm:kv_offload") for family in EngineMetrics(Engine(tiny()), "m", {}).collect()
    )
    assert (
        samples["vllm:external_prefix_cache_hits_total", None],
        samples["vllm:prompt_tokens_cached_total", None],
    ) == (
        96,
        96,
    )


def test_the_tier_counts_its_own_lookups_of_whole_prompts_under_lmcaches_names():
    """As a connector counts its own: each prompt's tokens once, at its first admission, and what the tier held of it
    from its start before that admission stored its blocks; the stores, every block copied in."""
    engine = Engine(tiny(100))
    for seq in (prompt(1), prompt(2, 511), prompt(1)):
        served(engine, seq)
    samples = {
        sample.name: sample.value
        for family in ConnectorMetrics(engine.kv, "m").collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert samples == {
        "lmcache:num_lookup_tokens_total": 100 + 511 + 100,
        "lmcache:num_lookup_hits_total": 96,  # the first prompt's 6 full blocks, again
        "lmcache:num_stored_tokens_total": (6 + 31) * 16,
    }


def test_the_tier_drops_its_least_recently_used_block():
    tier = HostTier(3)
    for block in (1, 2, 3):
        tier.store(block)
    tier.touch([1])  # loaded: the most recent
    tier.store(4)
    assert list(tier.blocks) == [3, 1, 4] and tier.lookup([3, 1, 4]) == 3 and tier.lookup([2, 3]) == 0


def test_a_prefix_past_the_tiers_capacity_is_recomputed():
    engine = Engine(tiny(12))  # the 511-token prompt's 31 full blocks push the first prompt's 6 out of 12
    for seq in (prompt(1), prompt(2, 511)):
        served(engine, seq)
    again = prompt(1)
    assert served(engine, again)[0] == 100
    assert engine.external_prefix_cache_hits == 0 and len(engine.kv.host.blocks) == 12


def rates(gpu, external):
    return pd.DataFrame({GPU: gpu, EXTERNAL: external}, index=[1, 4, 16, 64])


def test_the_verdict_names_the_gpu_cache_while_the_cpu_tier_carries_the_misses():
    verdict = kv_capacity_verdict(rates([0.45, 0.44, 0.05, 0.04], [0.0, 0.01, 0.45, 0.44]), 1584)
    assert verdict is not None and (verdict["tier"], verdict["gpu_users"], verdict["cpu_users"]) == (
        "GPU cache",
        16,
        None,
    )
    assert verdict["verdict"].startswith(
        "KV-capacity-bound: the working set passed the GPU cache of 1,584 tokens at 16"
    )


def test_the_verdict_names_the_cpu_tier_once_both_fall():
    verdict = kv_capacity_verdict(rates([0.45, 0.05, 0.04, 0.03], [0.0, 0.45, 0.02, 0.01]), None)
    assert verdict is not None and (verdict["tier"], verdict["gpu_users"], verdict["cpu_users"]) == ("CPU tier", 4, 16)
    assert "passed the CPU tier at 16 users" in verdict["verdict"]


def test_no_verdict_while_the_hit_rate_holds_or_without_a_tier_behind_a_fall():
    assert kv_capacity_verdict(rates([0.45, 0.40, 0.38, 0.42], [0.0, 0.0, 0.0, 0.0]), None) is None
    alone = kv_capacity_verdict(rates([0.45, 0.40, 0.1, 0.0], [None, None, None, None]), None)
    assert alone is not None and alone["tier"] == "GPU cache" and "CPU tier" not in alone["verdict"]


def test_a_ramp_of_sessions_passes_the_gpu_cache_then_the_cpu_tier(scenarios, tmp_path):
    """Each session user's second turn reuses its first (about 36 blocks); between the two, the other users' turns
    pass through the caches: 1 user fits the GPU's 99 blocks, 6 users only the CPU tier's 400, 24 users neither. The
    tier's own counters (LMCache's names, at /connector/metrics) are scraped with --connector-metrics-url."""
    out, port = tmp_path / "tiers", free_port()
    simulator = ["--num-gpu-blocks-override=100", f"--kv-offloading-size={400 * BLOCK_GIB}", "--max-model-len=1024"]
    simulator += [f"--port={port}", "--kv-cache-metrics", "--kv-cache-metrics-sample=1"]
    locust = ["--turns=2", "--turn-tokens=32", "--think-time=0", "--step-time=3"]
    locust.append(f"--connector-metrics-url=http://127.0.0.1:{port}/connector/metrics")
    args = [
        "run",
        "--scenario",
        "smoke",
        "--out",
        str(out),
        "--workers",
        "1",
        "--user",
        "session",
        "--levels",
        "1,6,24",
    ]
    args += ["--input-tokens", "512", "--output-tokens", "16"]
    assert scenarios([*args, *(f"--simulator-arg={a}" for a in simulator), *(f"--locust-arg={a}" for a in locust)]) == 0
    server = pd.read_csv(out / "run-1" / "server_metrics.csv").iloc[-1]  # the simulator's own counters at the end
    assert 0 < server["external_prefix_cache_hits"] < server["external_prefix_cache_queries"]
    assert server["prefix_cache_hits"] > 0
    # the connector looks up whole prompts: every prompt token the engine was asked about, at least once
    assert server["connector_lookup_tokens"] >= server["prefix_cache_queries"]
    assert 0 < server["connector_lookup_hits"] < server["connector_lookup_tokens"]
    assert server["connector_stored_tokens"] > 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    levels = {level["users"]: level for level in summary["levels"]}
    assert levels[1]["server_prefix_hit_rate"] > 0.3 and levels[1]["server_external_hit_rate"] < 0.05
    assert levels[6]["server_prefix_hit_rate"] < 0.1 and levels[6]["server_external_hit_rate"] > 0.3
    assert levels[24]["server_prefix_hit_rate"] < 0.1 and levels[24]["server_external_hit_rate"] < 0.1
    for level in levels.values():  # the tier holds what the GPU holds: its own rate is the tiers' combined one
        gpu, external = level["server_prefix_hit_rate"], level["server_external_hit_rate"]
        print(level["users"], gpu, external, level["connector_hit_rate"])
        assert level["connector_hit_rate"] == pytest.approx(gpu + external * (1 - gpu), abs=0.05)
    # where the prompt tokens came from (vLLM's by-source counters): the GPU's cache, then the tier, then neither
    sources = ("prompt_tokens_computed", "prompt_tokens_local_hit", "prompt_tokens_external")
    assert sum(server[source] for source in sources) == server["prompt_tokens"]
    assert (server["prompt_tokens_local_hit"], server["prompt_tokens_external"]) == (
        server["cached_tokens_device"],
        server["cached_tokens_host"],
    )
    assert (levels[1]["cached_device_share"], levels[6]["cached_host_share"]) == (1, 1)
    assert levels[24]["prompt_computed_share"] == 1
    # --kv-cache-metrics: at 1 user a block is hit (the second turn) before its eviction; past the GPU it is not
    assert 0 < levels[1]["kv_block_idle_mean_s"] < levels[1]["kv_block_lifetime_mean_s"], levels[1]
    for users in (6, 24):
        assert levels[users]["kv_block_idle_mean_s"] == pytest.approx(levels[users]["kv_block_lifetime_mean_s"])
    tiers = summary["kv_tiers"]
    assert (tiers["tier"], tiers["gpu_users"], tiers["cpu_users"], tiers["gpu_tokens"]) == ("CPU tier", 6, 24, 1584)
    report = (out / "report" / "report.md").read_text()
    assert "KV-capacity-bound: the working set passed the CPU tier at 24 users" in report
    assert "| Users | Computed | GPU prefix cache | KV connector | Cached: GPU | Cached: Host (DRAM) |" in report
    assert "## KV block lifetimes" in report


RESIDENCY = (
    "vllm:kv_block_lifetime_seconds",
    "vllm:kv_block_idle_before_evict_seconds",
    "vllm:kv_block_reuse_gap_seconds",
)


class Clock:
    """The engine time a test sets."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cached_run(kv, clock, at, block_hashes, prompt_len):
    """A sequence admitted at time ``at`` with its prefix hits, allocated its whole prompt, then released."""
    clock.now = at
    seq = Sequence(prompt_len, 1, block_hashes=block_hashes)
    assert kv.allocate(seq, prompt_len, reserve_tokens=prompt_len, hits=kv.lookup(seq))
    kv.release(seq)


def test_a_followed_block_has_vllms_lifetime_idle_time_and_reuse_gaps():
    """vLLM's KVCacheMetricsCollector: the lifetime runs from the block's birth, the idle time from its last access
    (a prefix hit, BlockPool.touch), and the reuse gaps are between accesses, the birth not among them."""
    clock = Clock()
    kv = KVCache(3, 16, True)  # 2 usable blocks
    kv.residency = Residency(1.0, clock)
    cached_run(kv, clock, 1.0, (7,), 16)  # block 7 registered (born) at t=1, then free but cached
    cached_run(kv, clock, 3.0, (7,), 17)  # 17 tokens: block 7 is a hit (the last token is computed)
    cached_run(kv, clock, 4.0, (7,), 17)
    assert kv.residency.evictions == []
    cached_run(kv, clock, 10.0, (8, 9), 32)  # two new blocks: the empty one, and block 7's, evicted
    assert kv.residency.drain() == [Eviction(lifetime=9.0, idle=6.0, reuse_gaps=(1.0,))]
    assert kv.residency.drain() == [] and set(kv.residency.blocks) == {8, 9}


def test_a_block_never_hit_is_idle_since_its_birth_and_only_its_last_four_accesses_make_gaps():
    clock = Clock()
    residency = Residency(1.0, clock)
    clock.now = 2.0
    residency.born(1)
    residency.born(2)
    for clock.now in (3.0, 5.0, 8.0, 13.0, 21.0):
        residency.accessed([1])
    clock.now = 30.0
    residency.evicted(1)
    residency.evicted(2)
    residency.evicted(3)  # never born: not followed
    assert residency.drain() == [Eviction(28.0, 9.0, (3.0, 5.0, 8.0)), Eviction(28.0, 28.0, ())]


def test_the_sample_rate_picks_the_blocks_followed_reproducibly():
    def followed(sample, seed):
        residency = Residency(sample, Clock(), seed)
        for block_hash in range(1000):
            residency.born(block_hash)
        return sorted(residency.blocks)

    assert followed(1.0, 0) == list(range(1000))  # vLLM's random() < rate: every block at 1
    some = followed(0.01, 5)
    assert 0 < len(some) < 50 and followed(0.01, 5) == some and followed(0.01, 6) != some


def test_a_reset_cache_forgets_the_followed_blocks():
    clock = Clock()
    kv = KVCache(3, 16, True)
    kv.residency = Residency(1.0, clock)
    cached_run(kv, clock, 1.0, (7,), 16)
    clock.now = 2.0
    assert kv.reset_prefix_cache() and kv.residency.blocks == {}
    cached_run(kv, clock, 5.0, (7,), 16)  # computed again: a new block, born at 5
    cached_run(kv, clock, 7.0, (8, 9), 32)
    assert kv.residency.drain() == [Eviction(2.0, 2.0, ())]


def test_the_engine_exports_the_residency_histograms_only_when_asked():
    """Three runs of a 100-token prompt (6 full blocks, hit by the second and third), then a 511-token one that takes
    all 32 usable blocks and evicts those 6: 6 lifetimes from the first admission, 6 idle times from the third, and
    one reuse gap each, the third admission's time less the second's."""
    engine = Engine(tiny())
    assert engine.kv.residency is None
    assert not any(family.name in RESIDENCY for family in EngineMetrics(engine, "m", {}).collect())
    engine = Engine(tiny())
    engine.track_residency(1.0)
    metrics = EngineMetrics(engine, "m", {})
    seqs = [prompt(1), prompt(1), prompt(1), prompt(2, 511)]
    for seq in seqs:
        engine.add_request(seq)
        while engine.has_work:
            metrics.observe_step(engine.step())
    first, second, third, long = (seq.first_scheduled for seq in seqs)
    assert first < second < third < long  # each admitted at its own engine time
    families = {family.name: family for family in metrics.collect() if family.name in RESIDENCY}
    assert list(families) == list(RESIDENCY)
    totals = {
        name: {s.name.removeprefix(name): s.value for s in family.samples if s.name.endswith(("_count", "_sum"))}
        for name, family in families.items()
    }
    lifetime, idle, gap = (totals[name] for name in RESIDENCY)
    assert (lifetime["_count"], idle["_count"], gap["_count"]) == (6, 6, 6)
    assert lifetime["_sum"] == pytest.approx(6 * (long - first))
    assert idle["_sum"] == pytest.approx(6 * (long - third))
    assert gap["_sum"] == pytest.approx(6 * (third - second))
    bounds = [float(s.labels["le"]) for s in families[RESIDENCY[0]].samples if s.name.endswith("_bucket")]
    assert bounds == [*KV_CACHE_RESIDENCY_BUCKETS, float("inf")]
    assert [s.labels for s in families[RESIDENCY[2]].samples if s.name.endswith("_count")] == [
        {"model_name": "m", "engine": "0"}
    ]


@pytest.mark.parametrize("rate", ["0", "1.5", "-0.1", "nan"])
def test_a_sample_rate_outside_zero_to_one_is_refused(rate, capsys):
    assert simulator_main(["--kv-cache-metrics", "--kv-cache-metrics-sample", rate]) == 2
    err = capsys.readouterr().err
    assert err == f"simulator: --kv-cache-metrics-sample must be in (0, 1], got {float(rate)}\n"


def residency_counts(url):
    samples = metric_samples(url)
    return tuple(samples.get((f"{name}_count", frozenset())) for name in RESIDENCY)


def test_the_simulator_counts_every_eviction_of_a_cached_block(simulator):
    """9 usable blocks of 16 tokens; 64-token prompts of token ids, one answer token each, one after another: A three
    times (the second and third hit A's first 3 blocks; the 4th is recomputed, A's own stays cached), then B, C, D and A
    again. B takes 4 empty blocks; C the last empty one and evicts 3 of A's (its tail first, as vLLM frees them); D
    evicts A's first block and 3 of B's; the last A misses (its blocks are gone: the server's prefix-cache hits stay
    at the 2 x 48 tokens of the first runs) and evicts B's last block and 3 of C's. So 11 evictions, each with a
    lifetime and an idle time, and a reuse gap for each of A's first 3 blocks (hit twice)."""
    sim = simulator(
        *("--kv-cache-metrics", "--kv-cache-metrics-sample", "1"),
        *("--num-gpu-blocks-override", "10", "--max-model-len", "128"),
    )
    assert residency_counts(sim.url) == (0, 0, 0)  # the families are there before any eviction, as in vLLM
    prompts = {name: list(range(1000 * index, 1000 * index + 64)) for index, name in enumerate("ABCD", start=1)}
    for name in "AAABCDA":
        response = requests.post(
            f"{sim.url}/v1/completions",
            json={"model": sim.model, "prompt": prompts[name], "max_tokens": 1},
            timeout=30,
        )
        assert response.status_code == 200, response.text
    samples = metric_samples(sim.url)
    assert (
        samples["vllm:prefix_cache_queries_total", frozenset()],
        samples["vllm:prefix_cache_hits_total", frozenset()],
    ) == (
        7 * 64,
        2 * 48,
    )
    assert residency_counts(sim.url) == (11, 11, 3)
    lifetime, idle = (samples[f"{name}_sum", frozenset()] for name in RESIDENCY[:2])
    assert lifetime > idle  # A's first blocks were idle only since their last hit
    bounds = sorted(
        float(dict(labels)["le"]) for name, labels in samples if name == "vllm:kv_block_reuse_gap_seconds_bucket"
    )
    assert bounds == [*KV_CACHE_RESIDENCY_BUCKETS, float("inf")]
    plain = simulator("--num-gpu-blocks-override", "10", "--max-model-len", "128")
    assert residency_counts(plain.url) == (None, None, None)
