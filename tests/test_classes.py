"""Traffic classes (vllm_stress/core/classes.py, vllm_stress/client/classes.py): the --traffic-class grammar, the
users' shares, the request fields and Locust names a class gives, and a mixed fleet (chat and embeddings classes
from the one chat user) checked against the simulator's request log and the report."""

import argparse
import json
from collections import Counter

import pandas as pd
import pytest

from benchmarks.harness import read_rows
from tests.helpers import SLOW_SIM, analyse
from vllm_stress.analysis.features.class_levels import jain, starvation
from vllm_stress.analysis.io.load import AnalysisError
from vllm_stress.analysis.report.pipeline import run_levels
from vllm_stress.client.checks import StopTarget
from vllm_stress.client.classes import ClassSet, canary_model, class_workload, request_fields, stats_name
from vllm_stress.client.prompts import Workload
from vllm_stress.core import schema
from vllm_stress.core.classes import APIS, ClassMix, TrafficClass, parse_class, parse_classes
from vllm_stress.core.slo import level_slos
from vllm_stress.simulator.api.requestlog import read_request_log
from vllm_stress.users.agent import AgentUser
from vllm_stress.users.chat import ChatUser
from vllm_stress.users.completions import CompletionsUser
from vllm_stress.users.embeddings import EmbeddingsUser
from vllm_stress.users.target import class_senders


def test_a_class_with_every_key_and_an_slo_holding_commas():
    parsed = parse_class("interactive:weight=3,input=256,output=64,priority=0,model=ad-1,slo=ttft_p99=500ms,tpot=50")
    assert parsed == TrafficClass("interactive", 3.0, 256, 64, "", 0, "ad-1", "ttft_p99=500ms,tpot=50")
    assert parse_class("batch") == TrafficClass("batch")
    assert parse_class("b:slo=e2e=60s").slo == "e2e=60s"
    assert parse_class("a:model=ad-1,canaries=model").canaries == "model" and parse_class("a").canaries == "run"
    embed = parse_class("e:weight=1,api=embeddings,input=128,slo=e2e_p99=2s")
    assert embed == TrafficClass("e", input=128, api="embeddings", slo="e2e_p99=2s") and parse_class("a").api == ""


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
        (
            "a:api=grpc",
            "^--traffic-class a: api must be one of chat, completions, embeddings, rerank, score, got 'grpc'$",
        ),
        ("e:api=embeddings,output=8", "^--traffic-class e: api=embeddings generates nothing: no output=$"),
        ("r:api=rerank,slo=ttft_p99=1s", "^--traffic-class r: api=rerank is timed end to end: its slo names e2e only$"),
        ("s:api=score,slo=e2e=2s,success=99%", "its slo names e2e only"),
    ],
)
def test_malformed_classes_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_class(text)


def test_the_chat_user_hands_a_class_naming_another_api_to_that_apis_user():
    """Every api= a class may name is the chat user's own or one it hands over; a session's or agent's own task, or
    another API's user, cannot send it: the test start refuses the run in one line."""
    assert {"chat", *ChatUser.apis} == set(APIS)
    assert ChatUser.api_user("") is ChatUser.api_user("chat") is ChatUser
    assert ChatUser.api_user("embeddings") is EmbeddingsUser and AgentUser.api_user("embeddings") is None
    mixed = parse_classes(["chat:output=8; embed:api=embeddings"])
    assert class_senders([ChatUser], mixed) == {ChatUser, EmbeddingsUser}
    with pytest.raises(StopTarget, match="^--traffic-class embed: CompletionsUser cannot send api=embeddings "):
        class_senders([CompletionsUser], mixed)


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


MIXED = "chat:weight=1,input=48,output=8; embed:weight=1,api=embeddings,input=24,slo=e2e_p99=5s"
EMBED_INPUTS = 3
PATHS = {"chat": "/v1/chat/completions", "embed": "/v1/embeddings"}


def test_a_mixed_fleet_of_chat_and_embeddings_on_one_server(run_locust, simulator, tmp_path):
    """Chat and embeddings classes from the one chat user over two levels: every row the request the server logged
    at its class's API (chat canaries only in the chat class), an embeddings row's prompt tokens the class's input
    times its inputs, by the usage and the server alike; the report has both classes at each level, each with its
    own figures, and each endpoint's peak and saturation point in its own unit, its peak its class's best level."""
    log = tmp_path / "requests.jsonl"
    sim = simulator(*SLOW_SIM, "--request-log", str(log))
    out = tmp_path / "run"
    levels = ["--levels", "2,4", "--step-time", "3", "--warmup", "1", "--ramp-time", "0.5"]
    proc = run_locust(
        *("-f", "locustfiles/chat.py,scenarios/shape.py", "-H", sim.url, "--headless", "--only-summary", *levels),
        *("--input-tokens", "16", "--output-tokens", "8", "--canary-share", "0.2", "--canary-min", "1"),
        *("--embedding-inputs", str(EMBED_INPUTS), f"--traffic-class={MIXED}", "--results-dir", str(out)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()  # flushes the log
    rows = read_rows(out / schema.REQUESTS_FILE)
    records = read_request_log(str(log))
    done = [row for row in rows if row["error"] != "Aborted"]
    assert {row["request_id"] for row in done} <= set(records) <= {row["request_id"] for row in rows}
    for row in done:
        record = records[row["request_id"]]
        assert row["ok"] == "1" and row["endpoint"] == record["path"] == PATHS[row["class"]], (row, record)
        if row["class"] == "embed":
            assert (row["name"], row["canary"], int(row["inputs"])) == ("embeddings", "", EMBED_INPUTS), row
            tokens = 24 * EMBED_INPUTS
            assert int(row["target_prompt_tokens"]) == int(row["prompt_tokens"]) == record["prompt_tokens"] == tokens
    assert {row["class"] for row in done if row["canary"]} == {"chat"}
    summary = analyse(out, tmp_path / "report")
    levels_seen = {(level["class"], level["users"]): level for level in summary["classes"]["levels"]}
    assert set(levels_seen) == {(name, users) for name in PATHS for users in (2, 4)}
    for users in (2, 4):
        chat, embed = levels_seen["chat", users], levels_seen["embed", users]
        assert chat["output_tokens_per_s"] > 0 and chat["ttft_p99_s"] > 0 and chat["inputs_per_s"] is None
        assert embed["inputs_per_s"] == pytest.approx(EMBED_INPUTS * embed["requests_per_s"]) and embed["e2e_p99_s"]
        assert embed["input_tokens_per_s"] == pytest.approx(24 * embed["inputs_per_s"]) and embed["ttft_p50_s"] is None
        assert embed["slo_met"] is True and embed["endpoint"] == PATHS["embed"]
    peaks = {entry["endpoint"]: entry for entry in summary["endpoints"]}
    for name, field, unit in (("chat", "output_tokens_per_s", "output tok/s"), ("embed", "inputs_per_s", "inputs/s")):
        entry, figures = peaks[PATHS[name]], {users: levels_seen[name, users][field] for users in (2, 4)}
        assert entry["unit"] == unit and {entry["peak_users"], entry["saturation_users"]} <= set(figures), entry
        # its peak is its best steady level (tests/test_endpoint_peaks.py): one of its class's levels, which two
        # levels of 3 s on a loaded machine are not always both (an embeddings peak at 2 users of 62.8 inputs/s, 4
        # users unsteady at 87.5)
        assert entry["peak"] == figures[entry["peak_users"]] <= max(figures.values()), (entry, figures)
    report = (tmp_path / "report" / "report.md").read_text()
    table = report.split("## Traffic classes")[1].split("\n## ")[0]
    assert "| endpoint | req/s | output tok/s |" in table and "| inputs/s | input tok/s | e2e p50 | e2e p99 |" in table
    assert "## Peak and saturation per endpoint" in report
    for users in (2, 4):
        assert f"| {users} | chat | {PATHS['chat']} | " in table and f"| {users} | embed | {PATHS['embed']} | " in table
