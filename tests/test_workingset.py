"""The working-set sweep (--shape working-set:C1,C2,...): its grammar's one-line errors, the prompts taking the
level's contexts in turn, the cliffs named in tokens, and a sweep on the simulator whose GPU cache and CPU tier fall
where their configured blocks put them."""

import argparse
import json
import math

import pandas as pd
import pytest

from vllm_stress.analysis.features.prefix import EXTERNAL, GPU
from vllm_stress.analysis.features.workingset import cliffs
from vllm_stress.client.prompts import Workload
from vllm_stress.client.workingset import LIVE
from vllm_stress.core.workingset import sweep_contexts
from vllm_stress.scenarios.shapes.levels import longest_run_s
from vllm_stress.scenarios.shapes.stretches import parse_shape
from vllm_stress.scenarios.shapes.sweep import check_sweep
from vllm_stress.simulator.engine.kvcache import num_cpu_blocks
from vllm_stress.simulator.model.profiles import load_profile

PREFIX_TOKENS = 160  # ten 16-token blocks per context
GPU_BLOCKS = 31  # 30 usable (vLLM's null block aside): three contexts
CPU_GIB = 100 * 16 * 8192 / 2**30  # 100 blocks of cpu-tiny's KV: ten contexts
SWEEP = [1, 2, 4, 8, 16]


@pytest.mark.parametrize(
    ("shape", "error"),
    [
        ("working-set:", "name each level's contexts"),
        ("working-set:2,x", "contexts are whole numbers"),
        ("working-set:4,2", "at least 1 and ascending"),
        ("working-set:2,2", "at least 1 and ascending"),
        ("working-set:0,2", "at least 1 and ascending"),
    ],
)
def test_a_bad_sweep_is_a_one_line_error(shape, error):
    with pytest.raises(ValueError, match=error) as raised:
        parse_shape(shape)
    assert "\n" not in str(raised.value)


def test_the_sweep_names_its_levels_and_needs_prefix_tokens_and_fixed_holds():
    assert sweep_contexts("working-set:1, 2,8") == [1, 2, 8] and sweep_contexts("soak:1") is None
    options = argparse.Namespace(shape="working-set:1,2", prefix_tokens=0, prefix_hit_rate=None, step_time="3")
    with pytest.raises(ValueError, match="needs --prefix-tokens"):
        check_sweep(options)
    options.prefix_tokens, options.step_time = 160, "auto"
    with pytest.raises(ValueError, match="not auto"):
        check_sweep(options)
    options.step_time = "3"
    assert check_sweep(options) == [1, 2]
    keys = {"shape": "working-set:1,2,4", "ramp-time": "1", "warmup": "2", "step-time": "3"}
    assert longest_run_s(keys) == 1 + 3 * (2 + 3) + 120


def test_the_prompts_take_the_levels_contexts_in_turn(monkeypatch):
    workload = Workload(20, 4, prefix_tokens=16, prefix_groups=8, seed=1)
    monkeypatch.setattr(LIVE, "count", 3)
    groups = [workload.next_request().prefix_group for _ in range(6)]
    assert sorted(groups[:3]) == [0, 1, 2] and groups[3:] == groups[:3]
    monkeypatch.setattr(LIVE, "count", None)
    assert len({workload.next_request().prefix_group for _ in range(200)}) == 8  # no sweep: drawn from every group


def test_the_cliffs_are_named_between_two_working_sets():
    levels = pd.DataFrame(
        {GPU: [0.9, 0.9, 0.05, 0.04, 0.03], EXTERNAL: [0.0, 0.0, 0.9, 0.9, 0.02]}, index=[160, 320, 640, 1280, 2560]
    )
    found = cliffs(levels)
    assert (found["gpu_cliff"], found["cpu_cliff"]) == ([320, 640], [1280, 2560])
    assert found["verdict"] == (
        "the GPU cache stopped holding the working set between 320 and 640 tokens; the CPU tier between 1,280 and "
        "2,560 tokens"
    )
    held = cliffs(levels.assign(**{GPU: 0.9}))
    assert held["gpu_cliff"] is None and held["verdict"] == "no tier's hit rate fell as the working set grew"


def expected_cliff(capacity_blocks):
    """The sweep's working sets either side of a tier of ``capacity_blocks`` 16-token blocks: the largest level
    whose contexts fit it, the first that does not."""
    fits = math.floor(capacity_blocks * 16 / PREFIX_TOKENS)
    return [max(c for c in SWEEP if c <= fits) * PREFIX_TOKENS, min(c for c in SWEEP if c > fits) * PREFIX_TOKENS]


def test_a_sweep_passes_the_gpu_cache_then_the_cpu_tier_where_their_blocks_say(scenarios, tmp_path):
    """Two users over 1 to 16 contexts of 160 tokens, taken in turn: the GPU's 30 blocks hold 3 contexts, the CPU
    tier's 100 blocks 10."""
    out = tmp_path / "sweep"
    simulator = [f"--num-gpu-blocks-override={GPU_BLOCKS}", f"--kv-offloading-size={CPU_GIB}", "--max-model-len=256"]
    locust = [f"--prefix-tokens={PREFIX_TOKENS}", "--step-time=3", "--warmup=2", "--ramp-time=1"]
    args = ["run", "--scenario", "smoke", "--out", str(out), "--workers", "1", "--user", "completions"]
    args += ["--levels", "2", "--shape", "working-set:" + ",".join(map(str, SWEEP))]
    args += ["--input-tokens", str(PREFIX_TOKENS + 8), "--output-tokens", "4"]
    assert scenarios([*args, *(f"--simulator-arg={a}" for a in simulator), *(f"--locust-arg={a}" for a in locust)]) == 0
    run = json.loads((out / "run-1" / "run.json").read_text())
    gpu_blocks = run["server_cache_config"]["num_gpu_blocks"] - 1  # less the null block
    cpu_blocks = num_cpu_blocks(load_profile("cpu-tiny", {"kv_offloading_size": CPU_GIB}))
    assert [level["contexts"] for level in run["working_set"]] == SWEEP
    (sweep,) = json.loads((out / "report" / "summary.json").read_text())["working_set"]
    for tier, blocks in (("gpu_cliff", gpu_blocks), ("cpu_cliff", cpu_blocks)):
        expected = expected_cliff(blocks)
        assert abs(SWEEP.index(sweep[tier][1] // PREFIX_TOKENS) - SWEEP.index(expected[1] // PREFIX_TOKENS)) <= 1
    for level in sweep["levels"]:  # the server's counters over each level's hold
        gpu, external, tokens = level[GPU], level[EXTERNAL], level["tokens"]
        if tokens <= gpu_blocks * 16:
            assert gpu > 0.8
        elif tokens <= cpu_blocks * 16:
            assert gpu < 0.1 and external > 0.8
        else:
            assert gpu < 0.1 and external < 0.1
        assert level["ttft_p99_s"] > 0 and level["output_tokens_per_s"] > 0
    assert f"working-set sweep, {sweep['verdict']}" in (out / "report" / "report.md").read_text()
