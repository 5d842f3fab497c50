"""vllm bench serve --save-result files of two vLLM releases, read and compared (docs/concepts/analysis.md, "vLLM
result files"). Both were written against the simulator (cpu-tiny, --max-num-seqs 8) at --max-concurrency 8 with
random prompts of 128 tokens, 32 output tokens and --ignore-eos:

- vllm-bench-serve-c8.json: vLLM 0.32.0's ``vllm bench serve`` (see tests/test_compare.py), 400 prompts,
  --metric-percentiles 50,99;
- vllm-bench-serve-0.6.4-c8.json: vLLM 0.6.4's benchmarks/benchmark_serving.py (from its source distribution),
  --backend openai-chat, 200 prompts, --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99. The
  six per-request lists it writes (input_lens, output_lens, ttfts, itls, generated_texts, errors) were dropped for
  size (180 kB; every error was empty) and tokenizer_id made relative; every other key is as it wrote it.

0.6.4 writes ``request_goodput:`` (with the colon) for ``request_goodput``, no ``failed``, and counts output tokens
by tokenizing the streamed text again: the simulator's text is about 114 tokens of the tiny model's tokenizer for
its 32 tokens, so its output tok/s and TPOT are not the server's.
"""

import json
import math
from pathlib import Path

import pytest

from tests.helpers import run_cli
from vllm_stress.analysis.io import vllm_json
from vllm_stress.analysis.io.load import AnalysisError

FIXTURES = Path(__file__).parent / "fixtures"
OLD = FIXTURES / "vllm-bench-serve-0.6.4-c8.json"
NEW = FIXTURES / "vllm-bench-serve-c8.json"


def only_row(path):
    """The one level row of a result file."""
    (level,) = vllm_json.read_results(path)
    assert len(level) == 1
    return level.iloc[0]


def test_the_0_6_4_field_set():
    row = only_row(OLD)
    assert row["users"] == 8 and not row["steady"]
    assert row["requests_per_s"] == pytest.approx(78.21, abs=0.01)  # vLLM printed 78.21
    assert row["output_tokens_per_s"] == pytest.approx(8911.52, abs=0.01)  # 22,790 tokens by its count
    assert row["total_tokens_per_s"] == pytest.approx(18921.82, abs=0.01)
    assert row["ttft_p50_s"] == pytest.approx(0.02765, abs=1e-5)
    assert row["ttft_p90_s"] == pytest.approx(0.03282, abs=1e-5)
    assert row["ttft_p99_s"] == pytest.approx(0.03817, abs=1e-5)
    assert row["tpot_p99_s"] == pytest.approx(0.00087, abs=1e-5)
    assert row["e2e_p99_s"] == pytest.approx(0.11173, abs=1e-5)
    assert math.isnan(row["failures"]) and math.isnan(row["requests"])  # no "failed": not a guess of 0
    assert math.isnan(row["goodput_requests_per_s"])  # "request_goodput:" is null without --goodput


def test_the_0_32_0_field_set():
    row = only_row(NEW)
    assert row["users"] == 8 and not row["steady"]
    assert row["requests"] == 400 and row["failures"] == 0
    assert row["output_tokens_per_s"] == pytest.approx(2703.64, abs=0.01)
    assert row["ttft_p99_s"] == pytest.approx(0.03411, abs=1e-5)
    assert math.isnan(row["ttft_p90_s"])  # --metric-percentiles 50,99: no p90 key
    assert math.isnan(row["goodput_requests_per_s"])


def test_the_old_goodput_key_is_read_as_the_new_one(tmp_path):
    path = tmp_path / "goodput.json"
    path.write_text(json.dumps(json.loads(OLD.read_text()) | {"request_goodput:": 70.5}))
    assert only_row(path)["goodput_requests_per_s"] == 70.5


def test_a_result_without_max_concurrency_is_refused(tmp_path):
    """vLLM before 0.6.4 had no --max-concurrency and writes no such key: an open loop, no level to compare."""
    path = tmp_path / "open.json"
    result = json.loads(OLD.read_text())
    del result["max_concurrency"]
    path.write_text(json.dumps(result))
    with pytest.raises(AnalysisError, match=r"open.json: max_concurrency is None: only closed-loop results"):
        vllm_json.read_results(path)


def test_the_two_releases_compare(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "compare", OLD, NEW, "--fail-on", "output_tok_s<-5%", "--out", tmp_path / "cmp")
    assert code == 0 and "compared 1 level(s), 1 not steady (ungated): 0 regression(s)" in out
    document = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    changes = {d["metric"]: d for d in document["differences"] if d["users"] == 8}
    assert changes["output_tok_s"]["baseline"] == pytest.approx(8911.52, abs=0.01)
    assert changes["output_tok_s"]["candidate"] == pytest.approx(2703.64, abs=0.01)
    assert changes["ttft_p99"]["baseline"] == pytest.approx(0.03817, abs=1e-5)
    assert changes["ttft_p99"]["candidate"] == pytest.approx(0.03411, abs=1e-5)
