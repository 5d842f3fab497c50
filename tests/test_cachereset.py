"""A cold prefix cache per level (--reset-prefix-cache): the simulator's engine empties its prefix cache as vLLM's
scheduler does (refused while a sequence holds blocks, unless the running ones are preempted first), and a step ramp
with the option has the server's cache emptied as each level begins, or says its levels began warm when the server
does not serve the route (docs/concepts/prefix-hit-rate.md)."""

import json

import pandas as pd

from tests.test_kvtiers import prompt, served, tiny
from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.sequence import Sequence


def test_a_reset_forgets_every_cached_prefix_and_the_tier():
    engine = Engine(tiny(100))
    served(engine, prompt(1))
    assert engine.reset_prefix_cache(reset_running_requests=False, reset_external=True)
    again = prompt(1)
    assert served(engine, again)[0] == 100 and again.num_cached_tokens == again.num_external_tokens == 0
    assert engine.kv.free_blocks == engine.kv.usable_blocks  # the blocks it freed are empty, not cached


def test_a_running_sequence_refuses_the_reset_unless_it_is_preempted():
    engine = Engine(tiny())
    served(engine, prompt(1))
    running = Sequence(100, 8, block_hashes=prompt(2).block_hashes)
    engine.add_request(running)
    engine.step()  # admitted: it holds its blocks
    assert not engine.reset_prefix_cache(reset_running_requests=False, reset_external=False)
    assert prompt(1).block_hashes[0] in engine.kv.refs  # nothing changed
    assert engine.reset_prefix_cache(reset_running_requests=True, reset_external=False)
    assert (engine.num_preemptions, list(engine.waiting), engine.running) == (1, [running], [])
    while engine.has_work:  # it is recomputed from its first token, the cache empty
        engine.step()
    assert running.num_output == 8 and running.num_preemptions == 1 and running.num_cached_tokens == 0


def ramp(scenarios, tmp_path, name, *simulator_args):
    """Levels 2 and 4 of 256-token prompts opening with one 128-token group prefix, the cache reset before each, and
    a cooldown between them: no request runs at the reset (one running would be preempted and, recomputed, fill the
    cache again before the next level's first request came)."""
    out = tmp_path / name
    argv = ["run", "--scenario", "smoke", "--out", str(out), "--workers", "1", "--locust-arg=--reset-prefix-cache"]
    argv += ["--locust-arg=--cooldown=2"]
    argv += ["--locust-arg=--input-tokens=256", "--locust-arg=--prefix-tokens=128"]
    argv += [f"--simulator-arg={arg}" for arg in simulator_args]
    assert scenarios([*argv, "--simulator-arg=--request-log", f"--simulator-arg={out / 'server.jsonl'}"]) == 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    return out, json.loads((out / "run-1" / "run.json").read_text()), summary


def test_each_level_begins_with_the_servers_cache_emptied(scenarios, tmp_path):
    out, run, summary = ramp(scenarios, tmp_path, "reset", "--dev-mode")
    resets = run["prefix_cache_resets"]
    assert [(reset["users"], reset["reset"]) for reset in resets] == [(2, True), (4, True)]
    [answer] = resets[1]["replicas"].values()
    assert (answer["status"], answer["success"]) == (200, True)
    # the server's own record: the first request it received after the second level's reset found no prefix
    # cached, though the first level had cached the group's; the requests after it did (cached again)
    log = pd.read_json(out / "server.jsonl", lines=True).sort_values("arrival")
    after = log[log["arrival"] > resets[1]["time"]]["cached_tokens"]
    assert log["cached_tokens"].max() >= 112 and after.iloc[0] == 0 and after.iloc[1:10].max() >= 112, after.head(10)
    metrics = pd.read_csv(out / "run-1" / "server_metrics.csv")
    before, after_reset = (
        metrics[side]["preemptions"]
        for side in (metrics["time"] < resets[1]["time"], metrics["time"] > resets[1]["time"])
    )
    assert before.iloc[-1] == after_reset.iloc[0]  # none ran at the second reset: none preempted
    assert summary["prefix_cache_resets"] == {"levels": 2, "reset": 2, "refusal": None}
    assert (
        "the server's prefix cache was emptied as each of its 2 levels began"
        in (out / "report" / "report.md").read_text()
    )


def test_a_server_without_the_route_is_said_to_start_each_level_warm(scenarios, tmp_path):
    out, run, summary = ramp(scenarios, tmp_path, "warm")
    assert [(reset["users"], reset["reset"]) for reset in run["prefix_cache_resets"]] == [(2, False), (4, False)]
    assert summary["prefix_cache_resets"]["refusal"].startswith("404")
    levels = {level["users"]: level for level in summary["levels"]}
    assert levels[4]["server_warmup_hit_rate"] > 0.3  # the group's prefix, cached since the first level
    report = (out / "report" / "report.md").read_text()
    assert "the server emptied its prefix cache for 0 of 2 levels (POST /reset_prefix_cache: 404" in report
    assert "the others began warm; their warm-ups hit the prefix cache for" in report
