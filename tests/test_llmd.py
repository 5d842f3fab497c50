"""llm-d's Benchmark Report: the reports written for a run's levels load with llm-d-benchmark's own loader
(tests/vendor/llmd/) and validate against its JSON Schema (tests/fixtures/llmd/, version 0.2.1), carry the figures of
known request rows, and compare reads them, and llm-d's own, as a side in every unit the schema allows."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest

from tests.helpers import run_cli
from tests.vendor.llmd.benchmark_report import import_benchmark_report, load_benchmark_report
from vllm_stress.analysis.io import llmd
from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.io.synthetic import request_rows, write_run
from vllm_stress.analysis.report.pipeline import run_levels

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = json.loads((FIXTURES / "llmd" / "br_v0_2_1_json_schema.json").read_text())
FORMATS = sorted((FIXTURES / "formats").glob("v*/run"))
LLMD_EXAMPLE = Path(__file__).parent / "vendor" / "llmd" / "benchmark_report" / "br_v0_2_1_example.yaml"
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
HOLD = (2, 95.0, 100.0, 110.0)  # levels.csv: 2 users, ramp from 95 s, held from 100 s to 110 s
E2E = np.array([1.0, 2.0, 3.0, 4.0, 5.0])  # the five successes ended in the hold (TTFT a tenth, 10 tokens each)


def reports_of(folder: Path) -> dict[int, dict]:
    return llmd.run_reports(load_run(folder), run_levels(folder))


def known_run(folder: Path, usage: bool = True) -> Path:
    """Level 2's rows: five successes and a failure ended in the hold; a success ended in the ramp (e2e 9 s) and one
    after the hold (e2e 4 s, started after it): neither is the level's. Without ``usage`` no row carried usage."""
    inside = request_rows(2, [102.0, 104.0, 106.0, 108.0, 109.0], E2E, prompt_tokens=100, completion_tokens=10)
    failed = request_rows(2, [105.0], [1.0], ok=0)
    outside = request_rows(2, [99.0, 115.0], [9.0, 4.0], prompt_tokens=100, completion_tokens=10)
    rows = pd.concat([inside, failed, outside]).sort_values("end_time")
    if not usage:
        rows[["prompt_tokens", "completion_tokens"]] = np.nan
    return write_run(folder, rows, [HOLD], meta={"model": "m", "input_tokens": 100, "complete": True})


@pytest.fixture(scope="module")
def known(tmp_path_factory) -> dict:
    return reports_of(known_run(tmp_path_factory.mktemp("known")))[2]


def test_llm_d_loads_every_report_the_suite_writes(known):
    for report in [known, *(r for folder in FORMATS for r in reports_of(folder).values())]:
        loaded = load_benchmark_report(report)
        assert type(loaded).__name__ == "BenchmarkReportV021"
        latency = loaded.results.request_performance.aggregate.latency
        assert latency.time_per_output_token.units == "s/token" and latency.time_to_first_token.units == "s"
        assert list(VALIDATOR.iter_errors(report)) == []


def test_llm_d_refuses_a_time_per_output_token_in_seconds(known):
    report = copy.deepcopy(known)
    report["results"]["request_performance"]["aggregate"]["latency"]["time_per_output_token"]["units"] = "s"
    with pytest.raises(ValueError, match='Invalid units "s"'):
        load_benchmark_report(report)


def test_the_report_carries_the_figures_of_the_requests_ended_in_the_hold(known):
    aggregate = known["results"]["request_performance"]["aggregate"]
    assert known["scenario"]["load"]["standardized"]["concurrency"] == 2
    assert aggregate["requests"]["total"] == 6 and aggregate["requests"]["failures"] == 1
    assert aggregate["requests"]["input_length"]["mean"] == 100 and aggregate["requests"]["output_length"]["max"] == 10
    ttft = aggregate["latency"]["time_to_first_token"]  # 0.1 .. 0.5 s: linear interpolation between them
    assert (ttft["min"], ttft["p50"], ttft["max"]) == pytest.approx((0.1, 0.3, 0.5))
    assert (ttft["p25"], ttft["p90"], ttft["p99"]) == pytest.approx((0.2, 0.46, 0.496))
    tpot = aggregate["latency"]["time_per_output_token"]  # (e2e - ttft) / 9 tokens = a tenth of e2e
    assert tpot["units"] == "s/token" and (tpot["p50"], tpot["p99"]) == pytest.approx((0.3, 0.496))
    e2e = aggregate["latency"]["request_latency"]
    assert (e2e["mean"], e2e["p50"], e2e["p99"]) == pytest.approx((3.0, 3.0, 4.96))
    rates = {name: rate["mean"] for name, rate in aggregate["throughput"].items()}
    # 5 requests, their 50 output tokens and 500 prompt tokens (first tokens in the hold), over its 10 s
    assert rates == pytest.approx({"request_rate": 0.5, "output_token_rate": 5.0, "total_token_rate": 55.0})


def test_a_level_without_usage_has_no_token_rate(tmp_path):
    aggregate = reports_of(known_run(tmp_path, usage=False))[2]["results"]["request_performance"]["aggregate"]
    assert aggregate["throughput"] == {"request_rate": {"units": "queries/s", "mean": pytest.approx(0.5)}}
    load_benchmark_report(reports_of(tmp_path)[2])


def test_the_validator_refuses_what_the_schema_does_not_allow(known):
    report = copy.deepcopy(known)
    report["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "seconds"
    del report["run"]["uid"]
    messages = sorted(error.message for error in VALIDATOR.iter_errors(report))
    assert any("'uid' is a required property" in message for message in messages)
    assert len(messages) == 2


def llm_d_report(path: Path, units: str, scale: float) -> Path:
    """llm-d's example report at 8 users, its TPOT (p50 36.9 ms, p99 52 ms) in ``units``, loaded and written by
    llm-d's own models."""
    report = import_benchmark_report(str(LLMD_EXAMPLE)).dump()
    report["scenario"]["load"]["standardized"]["concurrency"] = 8
    tpot = {"units": units, "mean": 0.037 * scale, "p50": 0.0369 * scale, "p90": 0.045 * scale, "p99": 0.052 * scale}
    report["results"]["request_performance"]["aggregate"]["latency"]["time_per_output_token"] = tpot
    path.parent.mkdir(exist_ok=True)
    load_benchmark_report(report).export_json(path)
    return path


@pytest.mark.parametrize(("units", "scale"), [("s/token", 1.0), ("ms/token", 1000.0), ("s", 1.0), ("ms", 1000.0)])
def test_a_report_reads_in_every_unit_the_schema_allows(tmp_path, units, scale):
    path = tmp_path / "br.json"
    if units.endswith("/token"):
        llm_d_report(path, units, scale)
    else:  # a time, not per token: how vllm-stress wrote TPOT before, its earlier reports read still
        report = json.loads(llm_d_report(tmp_path / "as-llm-d.json", "s/token", scale).read_text())
        report["results"]["request_performance"]["aggregate"]["latency"]["time_per_output_token"]["units"] = units
        path.write_text(json.dumps(report))
    (level,) = llmd.read_reports([path])[0].to_dict("records")
    assert level["users"] == 8 and level["tpot_p50_s"] == pytest.approx(0.0369)
    assert level["tpot_p99_s"] == pytest.approx(0.052)


def test_compare_reads_an_llm_d_report_with_its_tpot(tmp_path, capsys):
    baseline = llm_d_report(tmp_path / "base" / "br.json", "s/token", 1.0)
    candidate = llm_d_report(tmp_path / "cand" / "br.json", "ms/token", 1000.0)
    code, _, err = run_cli(capsys, "compare", "--baseline", baseline, "--candidate", candidate, "--out", tmp_path / "c")
    assert code == 0, err
    compared = json.loads((tmp_path / "c" / "compare.json").read_text())
    tpot = {d["metric"]: d for d in compared["differences"] if d["metric"].startswith("tpot")}
    assert tpot["tpot_p50"]["users"] == 8 and tpot["tpot_p50"]["baseline"] == pytest.approx(0.0369)
    assert tpot["tpot_p99"]["candidate"] == pytest.approx(0.052) and tpot["tpot_p99"]["change"] == pytest.approx(0)


def test_compare_reads_a_runs_benchmark_reports_as_its_baseline(tmp_path, capsys):
    run = FORMATS[-1]
    reports = reports_of(run)
    folder = tmp_path / "reports"
    folder.mkdir()
    for users, report in reports.items():
        (folder / f"users-{users}.json").write_text(json.dumps(report))
    code, _, err = run_cli(capsys, "compare", "--baseline", folder, "--candidate", run, "--out", tmp_path / "cmp")
    assert code == 0, err
    compared = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    for metric in ("ttft_p50", "tpot_p50", "e2e_p99", "output_tok_s"):
        same = [d for d in compared["differences"] if d["metric"] == metric]
        assert [d["users"] for d in same] == sorted(reports)
        assert all(d["change"] == pytest.approx(0, abs=1e-9) for d in same), metric
