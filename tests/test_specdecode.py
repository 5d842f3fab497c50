"""Speculative decoding: the simulator's drafts, acceptance and counters, multi-token chunks, the per-level acceptance
from the counters and the crossover against a baseline; one short simulator run end to end."""

import json
from collections import deque
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from prometheus_client import generate_latest

from vllm_stress.analysis.features.spec_counters import crossover, spec_decode_stats
from vllm_stress.core.metrics import tokens_per_chunk
from vllm_stress.master.serverscraper import parse_metrics
from vllm_stress.simulator.api.metrics import EngineMetrics
from vllm_stress.simulator.api.protocol import ChunkFormat
from vllm_stress.simulator.api.streams import RequestStream, _due_chunks
from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.sequence import Sequence
from vllm_stress.simulator.engine.specdecode import mean_accepted_length, parse_schedule
from vllm_stress.simulator.model.profiles import load_profile

K3 = {"spec_tokens": 3, "spec_acceptance": "0.7", "jitter": 0.0}


def run_engine(overrides, seqs, metrics=None):
    engine = Engine(load_profile("cpu-tiny", overrides), seed=3)
    engine.add_request(*seqs)
    steps = 0
    while engine.has_work and steps < 100_000:
        result = engine.step()
        steps += 1
        if metrics:
            metrics(engine).observe_step(result)
    return engine, steps


def test_mean_accepted_length_is_the_geometric_sum():
    assert mean_accepted_length((0.7,), 3) == pytest.approx(1 + 0.7 + 0.49 + 0.343)  # 2.533
    assert mean_accepted_length((0.8, 0.5), 3) == pytest.approx(1 + 0.8 + 0.4 + 0.2)  # the last value repeats
    assert mean_accepted_length((0.7,), 0) == 1


def test_the_server_counters_give_the_accepted_length_of_the_model():
    engine, steps = run_engine(K3, [Sequence(64, 3000) for _ in range(4)])
    spec = engine.spec
    assert 1 + spec.num_accepted_tokens / spec.num_drafts == pytest.approx(2.533, abs=0.05)
    assert spec.num_draft_tokens == 3 * spec.num_drafts
    per_position = np.array(spec.accepted_per_pos) / spec.num_drafts  # P(draft i accepted) = 0.7 ** (i + 1)
    assert per_position == pytest.approx([0.7, 0.49, 0.343], abs=0.03)
    baseline, baseline_steps = run_engine({"jitter": 0.0}, [Sequence(64, 3000) for _ in range(4)])
    assert baseline_steps / steps == pytest.approx(2.533, rel=0.05)  # the same tokens in fewer steps


def test_output_stops_exactly_at_max_tokens_and_at_the_eos():
    seqs = [Sequence(32, 50), Sequence(32, 500, stop_after=77)]
    engine, _ = run_engine(K3, seqs)
    assert [(seq.num_output, seq.finish_reason) for seq in seqs] == [(50, "length"), (77, "stop")]


def test_drafts_fall_with_the_batch_on_a_schedule():
    engine, _ = run_engine(K3 | {"spec_tokens_per_batch": "1-2:3,3-1024:1"}, [Sequence(32, 400) for _ in range(4)])
    assert engine.spec.drafts(2) == 3 and engine.spec.drafts(4) == 1 and engine.spec.drafts(5000) == 1
    assert 1 + engine.spec.num_accepted_tokens / engine.spec.num_drafts < 2  # mostly one draft: 1 + 0.7
    with pytest.raises(ValueError, match="run on from 1"):
        parse_schedule("2-8:3", 3)


def test_the_step_pays_for_its_drafter():
    base, spec = (load_profile("cpu-tiny", o) for o in ({"jitter": 0.0}, K3 | {"spec_draft_cost": 0.1}))
    plain, drafted = Engine(base), Engine(spec)
    for engine in (plain, drafted):
        engine.add_request(Sequence(64, 10))
    assert drafted.step().duration == pytest.approx(plain.step().duration * 1.3)  # 3 drafts x 0.1


def test_metrics_carry_vllms_spec_decode_counters():
    collectors = {}
    engine, _ = run_engine(K3, [Sequence(64, 200)], lambda e: collectors.setdefault(e, EngineMetrics(e, "m", {})))
    exposition = generate_latest(collectors[engine].registry()).decode()
    for position in range(3):
        labels = f'{{engine="0",model_name="m",position="{position}"}}'
        assert f"vllm:spec_decode_num_accepted_tokens_per_pos_total{labels}" in exposition
    values = parse_metrics(exposition).values
    assert values["vllm:spec_decode_num_drafts_total"] == engine.spec.num_drafts
    assert values["vllm:spec_decode_num_accepted_tokens_total"] == engine.spec.num_accepted_tokens
    assert values["vllm:generation_tokens_total"] == 200


def test_a_chunk_carries_every_token_of_a_step():
    fmt = ChunkFormat(chat=False, model="m", continuous_usage=False, prompt_tokens=5)
    stream = RequestStream(interval=1, streaming=True)
    seq = Sequence(5, 10)
    stream.add(seq, offset=0)
    seq.step_ends = deque()
    chunks = []
    for steps, reason in (([1], None), ([4], None), ([6, 8, 10], "length")):  # the last three published at once
        seq.step_ends.extend(steps)
        seq.num_output, seq.finish_reason = steps[-1], reason
        stream.on_token(seq)
        chunks.append(len(_due_chunks(stream, fmt, 0)))
    assert chunks == [1, 1, 3]  # a chunk per step: five steps, five chunks, ten tokens
    assert tokens_per_chunk(10, 5) == 2.0


def test_acceptance_per_level_from_the_counters():
    server = pd.DataFrame(
        {
            "time": [0.0, 10.0, 20.0, 30.0],
            "spec_drafts": [0, 100, 100, 300],
            "spec_draft_tokens": [0, 300, 300, 900],
            "spec_accepted_tokens": [0, 150, 150, 270],
        }
    )
    windows = pd.DataFrame(
        {"users": [1, 8], "start": [5.0, 25.0], "end": [15.0, 35.0]}
    )  # gains since the scrape before
    stats = spec_decode_stats(server, windows)
    assert stats.loc[1].tolist() == pytest.approx([0.5, 2.5])
    assert stats.loc[8].tolist() == pytest.approx([120 / 600, 1 + 120 / 200])


@dataclass
class Change:
    users: int
    metric: str
    baseline: float
    candidate: float

    @property
    def change(self) -> float:
        return self.candidate - self.baseline


def test_the_crossover_is_the_first_level_no_better():
    differences = [
        Change(1, "output_tok_s", 100, 200),
        Change(1, "tpot_p50", 0.010, 0.005),
        Change(8, "output_tok_s", 600, 700),
        Change(8, "tpot_p50", 0.012, 0.013),  # slower per token already
        Change(32, "output_tok_s", 900, 800),
    ]
    found = crossover(differences, pd.Series([2.5, 2.4, 2.4]))
    assert found.users == 8 and "tpot_p50" in found.reason
    assert crossover(differences[:2], pd.Series([2.5])).users is None
    assert crossover(differences, pd.Series([np.nan])) is None  # the candidate did not speculate


def test_a_short_simulator_run_reports_the_accepted_length(scenarios, tmp_path):
    out = tmp_path / "spec"
    argv = ["run", "--scenario", "smoke", "--out", str(out), "--workers", "1", "--locust-arg=--levels=2"]
    argv += ["--simulator-arg=--spec-tokens=3", "--simulator-arg=--spec-acceptance=0.7", "--output-tokens=64"]
    assert scenarios(argv) == 0
    (level,) = json.loads((out / "report" / "summary.json").read_text())["levels"]
    assert level["server_spec_accepted_length"] == pytest.approx(2.533, abs=0.25)
    assert level["server_spec_acceptance_rate"] == pytest.approx((2.533 - 1) / 3, abs=0.08)
    assert 1.8 < level["tokens_per_chunk"] < 3.0  # the first chunk has one token, the others a step's
    assert "## Speculative decoding" in (out / "report" / "report.md").read_text()
