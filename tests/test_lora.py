"""LoRA adapters: the pool each request's model is drawn from, the simulator's slots (vLLM's max_loras rule, the host
LRU and its load cost, the gauges), and the LoRA columns a scrape reads."""

import argparse
import json
from collections import Counter

import pandas as pd
import pytest

from tests.helpers import analyse
from vllm_stress.analysis.io.synthetic import request_rows, write_run
from vllm_stress.client.adapters import AdapterPool, adapter_names, adapter_pool, weights
from vllm_stress.master.lorascrape import lora_values
from vllm_stress.simulator.api.metrics import EngineMetrics
from vllm_stress.simulator.api.protocol import model_list
from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.lora import (
    LoraConfig,
    LoraSlots,
    adapter_bytes,
    adapter_cards,
    adapter_request,
    parse_modules,
)
from vllm_stress.simulator.engine.sequence import Sequence
from vllm_stress.simulator.model.errors import ApiError
from vllm_stress.simulator.model.profiles import load_profile

T0 = 1_700_000_000.0


def test_the_pool_is_named_by_count_or_by_names():
    assert adapter_names("3") == ("adapter-0", "adapter-1", "adapter-2")
    assert adapter_names(" base, sql-lora ") == ("base", "sql-lora")
    assert adapter_names("") == ()
    for bad in ("0", "a,b,a"):
        with pytest.raises(ValueError):
            adapter_names(bad)


def test_zipf_weights_fall_as_one_over_rank_to_the_s():
    assert weights("uniform", 3) == [1.0, 1.0, 1.0]
    assert weights("zipf", 4) == [1.0, 1 / 2, 1 / 3, 1 / 4]
    assert weights("zipf:2", 3) == [1.0, 1 / 4, 1 / 9]
    for bad in ("zipf:x", "zipf:-1", "pareto", "uniform:2"):
        with pytest.raises(ValueError):
            weights(bad, 3)


def test_draws_follow_zipf_and_repeat_with_the_seed():
    names = adapter_names("8")
    pool = AdapterPool(names, "zipf", seed=7)
    draws = [pool.draw() for _ in range(40_000)]
    again = AdapterPool(names, "zipf", seed=7)
    assert [again.draw() for _ in range(100)] == draws[:100]
    shares = Counter(draws)
    harmonic = sum(1 / k for k in range(1, 9))  # 2.718
    assert shares["adapter-0"] / len(draws) == pytest.approx(1 / harmonic, abs=0.01)  # 0.368
    assert shares["adapter-7"] / len(draws) == pytest.approx(1 / 8 / harmonic, abs=0.005)  # 0.046


def test_a_process_shares_one_pool_per_option_set():
    options = argparse.Namespace(lora_adapters="a,b", lora_distribution="uniform", lora_seed=3)
    assert adapter_pool(options) is adapter_pool(options)
    assert adapter_pool(argparse.Namespace(lora_adapters="", lora_distribution="uniform", lora_seed=0)) is None


def lora_engine(max_loras=1, max_cpu_loras=0, **profile):
    prof = load_profile("cpu-tiny", {"jitter": 0.0, **profile})
    engine = Engine(prof)
    engine.lora = LoraSlots(LoraConfig(parse_modules([], 4), max_loras, max_cpu_loras), prof)
    return engine


def test_a_request_whose_adapter_finds_no_slot_waits_and_is_counted_deferred():
    """vLLM's scheduler skips a waiting request whose adapter is not in the batch once max_loras adapters are;
    requests behind it (base model, or an adapter in the batch) are still admitted."""
    engine = lora_engine(max_loras=1)
    first, other, base, same = (Sequence(8, 3, adapter="adapter-0"), Sequence(8, 3, adapter="adapter-1"),
                                Sequence(8, 3), Sequence(8, 3, adapter="adapter-0"))  # fmt: skip
    for seq in (first, other, base, same):
        engine.add_request(seq)
    engine.step()
    assert engine.running == [first, base, same]
    assert list(engine.waiting) == [other]
    assert engine.lora.deferred == {other}
    assert engine.lora.in_flight() == ["adapter-0", "adapter-1"]
    metrics = {family.name: family for family in EngineMetrics(engine, "m", {}).collect()}
    reasons = {
        sample.labels["reason"]: sample.value for sample in metrics["vllm:num_requests_waiting_by_reason"].samples
    }
    assert reasons == {"capacity": 0, "deferred": 1}
    while first.finish_reason is None or same.finish_reason is None:
        engine.step()
    engine.step()  # adapter-0 has left the batch: adapter-1 gets the slot
    assert other in engine.running and not engine.lora.deferred


def test_an_adapter_not_resident_costs_a_load_and_the_lru_evicts_the_oldest():
    engine = lora_engine(max_loras=1, max_cpu_loras=2)
    slots = engine.lora
    size = adapter_bytes(load_profile("cpu-tiny"), 16)
    assert size == 16 * ((512 + 512) + 2 * (512 + 256) + (512 + 512)) * 8 * 2  # rank x q,k,v,o in+out x layers x 2 B
    assert slots.load_s == pytest.approx(0.01 + size / 2e9)
    for name in ("adapter-0", "adapter-1", "adapter-0", "adapter-2", "adapter-1"):
        seq = Sequence(8, 1, adapter=name)
        base = slots.step_seconds(1.0, [(seq, 8)], 8)
        assert base >= 1.1  # every token a LoRA token: 1 + lora_token_factor
    assert slots.loads == 4  # adapter-0 was still resident the second time; adapter-1 was evicted by adapter-2
    assert list(slots.resident) == ["adapter-2", "adapter-1"]
    assert slots.activations == 5  # one GPU slot: every change of adapter copies one in
    assert slots.step_seconds(1.0, [(Sequence(8, 1), 8)], 8) == 1.0  # the base model pays nothing


def test_the_info_gauge_keeps_each_label_set_with_the_time_it_was_set():
    engine = lora_engine(max_loras=2)
    engine.add_request(Sequence(8, 2, adapter="adapter-1"))
    engine.step()
    engine.lora.record_info()
    family = engine.lora.info_family()
    (sample,) = family.samples
    assert sample.labels == {
        "max_lora": "2",
        "waiting_lora_adapters": "adapter-1",
        "running_lora_adapters": "adapter-1",
    }
    while engine.has_work:
        engine.step()
    engine.lora.record_info()
    assert [s.labels["running_lora_adapters"] for s in engine.lora.info_family().samples] == ["adapter-1", ""]


def test_load_and_unload_answer_as_vllm_does():
    modules = {"a": "/a"}
    assert adapter_request({"lora_name": "b", "lora_path": "/b"}, modules, "base", loading=True) == ("b", "/b")
    assert adapter_request({"lora_name": "a"}, modules, "base", loading=False) == ("a", "/a")
    cases = [
        ({"lora_name": "b"}, True, 400),
        ({"lora_name": "base", "lora_path": "/x"}, True, 400),
        ({"lora_name": "a", "lora_path": "/a"}, True, 400),
        ({"lora_name": "zzz"}, False, 404),
    ]
    for body, loading, status in cases:
        with pytest.raises(ApiError) as error:
            adapter_request(body, modules, "base", loading)
        assert error.value.status == status


def test_models_lists_each_adapter_with_the_base_model_as_parent():
    models = adapter_cards(model_list("base", "/models/base", 4096, 0), parse_modules(["sql=/a/sql"], 1), "base")
    cards = [(card["id"], card["root"], card["parent"], card["max_model_len"]) for card in models["data"]]
    assert cards == [
        ("base", "/models/base", None, 4096),
        ("adapter-0", "/adapters/adapter-0", "base", None),
        ("sql", "/a/sql", "base", None),
    ]


def test_a_scrape_reads_the_newest_label_set_and_the_deferred_requests():
    text = """# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b,c",waiting_lora_adapters="a,b,c"} 1.7e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters="a"} 1.5e+09
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 4.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 3.0
"""
    assert lora_values(text) == {"lora_running": 3, "lora_waiting": 3, "max_lora": 2, "waiting_deferred": 3.0}
    assert lora_values("vllm:num_requests_running 1.0\n") == {}


def test_eight_zipf_adapters_over_two_slots_are_adapter_bound_under_load(scenarios, tmp_path):
    """8 adapters drawn by Zipf's law against a simulator whose batch holds 2: one user never waits for a slot; 16
    users keep more adapters in flight than the batch holds, and the server counts the requests it defers."""
    out = tmp_path / "lora"
    args = ["--levels=1,16", "--input-tokens=32", "--output-tokens=32", "--lora-adapters=8", "--lora-distribution=zipf"]
    sim = ["--lora-adapters=8", "--max-loras=2", "--max-cpu-loras=4"]
    run = ["run", "--scenario", "smoke", "--out", str(out), "--workers", "1"]
    assert scenarios([*run, *(f"--locust-arg={a}" for a in args), *(f"--simulator-arg={a}" for a in sim)]) == 0
    rows = pd.read_csv(out / "run-1" / "requests.csv")
    drawn = rows["adapter"].value_counts()
    assert set(drawn.index) <= {f"adapter-{k}" for k in range(8)} and drawn.idxmax() == "adapter-0"
    server = pd.read_csv(out / "run-1" / "server_metrics.csv")
    busy = server[server["users"] == 16]
    assert (server["max_lora"].dropna() == 2).all()
    assert busy["lora_running"].max() > 2 and busy["waiting_deferred"].max() > 0  # what the simulator exported
    assert server.loc[server["users"] == 1, "waiting_deferred"].max() == 0
    (config,) = json.loads((out / "report" / "summary.json").read_text())["configs"].values()
    bounds = {level["users"]: level["bound"] for level in config["levels"]}
    assert not bounds[1].startswith("adapter-bound") and bounds[16].startswith("adapter-bound")
    # which requests the adapter table counts: test_the_adapter_table_counts_each_adapters_successes_in_the_window
    assert set(drawn.index) <= {row["adapter"] for row in config["adapters"]}  # and the run's model, for canaries
    assert "## LoRA adapters: smoke" in (out / "report" / "report.md").read_text()


def test_the_adapter_table_counts_each_adapters_successes_in_the_window(tmp_path):
    """One level holding from T0+10 to T0+110: of eight requests, the one ending in the ramp, the failure and the one
    ending after the hold are not counted; the other five are, by the adapter each asked for."""
    ends = [5, 20, 30, 40, 50, 60, 70, 115]
    rows = request_rows(10, [T0 + end for end in ends], 2.0, ok=[1, 1, 1, 1, 0, 1, 1, 1])
    rows["adapter"] = "adapter-0 adapter-0 adapter-1 adapter-0 adapter-1 base adapter-1 adapter-0".split()
    run = write_run(tmp_path / "run", rows, [(10, T0, T0 + 10, T0 + 110)], meta={"model": "m", "complete": True})
    (config,) = analyse(run, tmp_path / "report")["configs"].values()
    counted = {(row["users"], row["adapter"]): row["requests"] for row in config["adapters"]}
    assert counted == {(10, "adapter-0"): 2, (10, "adapter-1"): 2, (10, "base"): 1}
