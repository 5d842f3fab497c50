"""Traffic classes (vllm_stress/core/classes.py, vllm_stress/client/classes.py): the --traffic-class grammar, the
users' shares, and the request fields and Locust names a class gives."""

import argparse
import json
from collections import Counter

import pandas as pd
import pytest

from benchmarks.harness import read_rows
from vllm_stress.analysis.features.class_levels import jain, starvation
from vllm_stress.analysis.io.load import AnalysisError
from vllm_stress.analysis.report.pipeline import run_levels
from vllm_stress.client.classes import ClassSet, canary_model, class_workload, request_fields, stats_name
from vllm_stress.client.prompts import Workload
from vllm_stress.core import schema
from vllm_stress.core.classes import ClassMix, TrafficClass, parse_class, parse_classes
from vllm_stress.core.slo import level_slos


def test_a_class_with_every_key_and_an_slo_holding_commas():
    parsed = parse_class("interactive:weight=3,input=256,output=64,priority=0,model=ad-1,slo=ttft_p99=500ms,tpot=50")
    assert parsed == TrafficClass("interactive", 3.0, 256, 64, "", 0, "ad-1", "ttft_p99=500ms,tpot=50")
    assert parse_class("batch") == TrafficClass("batch")
    assert parse_class("b:slo=e2e=60s").slo == "e2e=60s"
    assert parse_class("a:model=ad-1,canaries=model").canaries == "model" and parse_class("a").canaries == "run"


def test_several_classes_in_one_value_and_repeated():
    classes = parse_classes(["a:weight=1; b:weight=2", "c:priority=2"])
    assert [c.name for c in classes] == ["a", "b", "c"] and classes[2].priority == 2


@pytest.mark.parametrize(
    "text, message",
    [
        (":weight=1", "NAME"),
        ("a:weight=0", "weight must be more than 0"),
        ("a:input=0", "input must be at least 1"),
        ("a:speed=3", "KEY=VALUE"),
        ("a:priority=high", "priority must be a number"),
        ("a:canaries=adapter", "canaries must be one of run, model"),
    ],
)
def test_malformed_classes_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_class(text)


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ValueError, match="twice"):
        parse_classes(["a", "a:weight=2"])


def test_shares_are_exact_at_every_multiple_of_the_total_weight():
    mix = ClassMix([TrafficClass("a", 3), TrafficClass("b", 1)])
    order = [mix.of_user(i).name for i in range(8)]
    assert order == ["a", "a", "b", "a"] * 2
    mix = ClassMix([TrafficClass("x", 0.5), TrafficClass("y", 0.3), TrafficClass("z", 0.2)])
    assert Counter(mix.of_user(i).name for i in range(100)) == {"x": 50, "y": 30, "z": 20}
    assert mix.of_user(3).name == ClassMix(mix.classes).of_user(3).name  # by index, the same in every process


def test_workers_take_interleaved_indices():
    classes = [TrafficClass("a"), TrafficClass("b")]
    first, second = ClassSet(classes, worker_index=0, workers=2), ClassSet(classes, worker_index=1, workers=2)
    assert [first.next_class().name for _ in range(2)] == ["a", "a"]  # indices 0 and 2
    assert [second.next_class().name for _ in range(2)] == ["b", "b"]  # indices 1 and 3


def test_request_fields_and_locust_name():
    assert request_fields(None) == {} and request_fields(TrafficClass("a")) == {}
    assert request_fields(TrafficClass("a", priority=1, model="adapter")) == {"priority": 1, "model": "adapter"}
    assert stats_name("chat", "batch") == "chat [batch]" and stats_name("chat", "") == "chat"
    assert stats_name("chat", "batch", canary=True) == "chat canary"  # the canaries' own entry, classless
    with_model = TrafficClass("a", priority=1, model="adapter")
    assert request_fields(with_model, canary=True) == {"priority": 1}  # the run's model unless the class asks
    asks = TrafficClass("a", model="adapter", canaries="model")
    assert request_fields(asks, canary=True) == {"model": "adapter"} and canary_model(asks, "base") == "adapter"
    assert canary_model(with_model, "base") == "base" and canary_model(None, "base") == "base"


def test_a_class_workload_keeps_the_words_and_takes_its_lengths():
    base = Workload(2048, 512, words=["w"] * 30, overhead=5, seed=1)
    options = argparse.Namespace(output_tokens=512)
    short = class_workload(base, TrafficClass("i", input=64, output=16), options, None)
    spec = short.next_request()
    assert spec.target_prompt_tokens == 64 and spec.max_tokens == 16 and len(spec.text.split()) == 64 - 5
    assert base.next_request().target_prompt_tokens == 2048


def test_jain_index():
    assert jain([1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5  # one class alone is served: 1/n
    assert jain([0.5, 1.0]) == pytest.approx(2.25 / 2.5)
    assert jain([0.9]) is None and jain([0.0, 0.0]) is None


def test_starvation_verdict_names_the_class_that_took_the_tokens():
    rows = pd.DataFrame(
        {
            "class": ["interactive", "batch", "interactive", "batch"],
            "users": [8, 8, 64, 64],
            "share": [0.5, 0.5, 0.5, 0.5],
            "token_share": [0.4, 0.6, 0.08, 0.92],
            "slo_met": [True, True, False, True],
            "ttft_p99_s": [0.2, 1.0, 2.5, 9.0],
        }
    )
    slos = {"interactive": level_slos("ttft_p99=500ms", ["ttft"], [99]), "batch": []}
    assert starvation(rows, slos) == [
        "batch took 92.0 % of the tokens at 64 users (50.0 % of the users) while interactive missed ttft_p99 ≤ 500 ms"
    ]


def test_a_two_class_run_on_the_priority_simulator(scenarios, tmp_path):
    """One short level against the simulator with its priority policy: each row carries its user's class and that
    class's lengths, Locust names entries per class, and the report has a row per class with its own SLO judged."""
    out = tmp_path / "classes"
    classes = (
        "short:weight=1,input=64,output=8,priority=0,slo=ttft_p99=30s; long:weight=3,input=256,output=16,priority=1"
    )
    code = scenarios(
        [
            *("run", "--scenario", "smoke", "--out", str(out), "--simulator-arg=--scheduling-policy=priority"),
            *("--locust-arg=--levels=4", f"--locust-arg=--traffic-class={classes}"),
        ]
    )
    assert code == 0
    rows = read_rows(out / "run-1" / schema.REQUESTS_FILE)
    assert {row["class"] for row in rows} == {"short", "long"}
    for row in rows:
        if row["ok"] == "1" and not row["canary"]:  # a canary is a question of its own size
            assert int(row["prompt_tokens"]) == {"short": 64, "long": 256}[row["class"]], row
    names = {row["Name"] for row in read_rows(out / "run-1" / "locust_stats.csv")}
    assert {"chat [short]", "chat [long]"} <= names
    summary = json.loads((out / "report" / "summary.json").read_text())
    levels = {level["class"]: level for level in summary["classes"]["levels"]}
    assert set(levels) == {"short", "long"} and levels["short"]["share"] == 0.25
    assert levels["short"]["slo_met"] is True and levels["long"]["slo_met"] is None  # long has no SLO
    assert "## Traffic classes" in (out / "report" / "report.md").read_text()
    short = run_levels(out / "run-1", "short")  # what compare --class reads
    assert short["requests"].tolist() == [levels["short"]["requests"]] and levels["short"]["requests"] > 0
    with pytest.raises(AnalysisError, match="no request of class 'batch'"):
        run_levels(out / "run-1", "batch")
