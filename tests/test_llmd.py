"""llm-d's Benchmark Report: the reports written for a run's levels validate against the published JSON Schema
(tests/fixtures/llmd/, version 0.2.1), carry the report's own figures, and compare reads them as a side."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from tests.helpers import run_cli
from vllm_stress.analysis.io import llmd
from vllm_stress.analysis.io.load import load_run
from vllm_stress.core import schema

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = json.loads((FIXTURES / "llmd" / "br_v0_2_1_json_schema.json").read_text())
RUN = FIXTURES / "formats" / "v4" / "run"
SUMMARY = json.loads((FIXTURES / "formats" / "v4" / schema.SUMMARY_JSON).read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


@pytest.fixture(scope="module")
def reports():
    return llmd.run_reports(load_run(RUN))


def test_each_levels_report_validates_against_the_published_schema(reports):
    assert SCHEMA["properties"]["version"]["default"] == llmd.BR_VERSION
    assert sorted(reports) == [level["users"] for level in SUMMARY["levels"]]
    for report in reports.values():
        assert list(VALIDATOR.iter_errors(report)) == []
        assert report["version"] == "0.2.1"


def test_the_validator_refuses_what_the_schema_does_not_allow(reports):
    report = copy.deepcopy(next(iter(reports.values())))
    report["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "seconds"
    del report["run"]["uid"]
    messages = sorted(error.message for error in VALIDATOR.iter_errors(report))
    assert any("'uid' is a required property" in message for message in messages)
    assert len(messages) == 2


def test_the_reports_carry_the_reports_figures(reports):
    for level in SUMMARY["levels"]:
        aggregate = reports[level["users"]]["results"]["request_performance"]["aggregate"]
        assert reports[level["users"]]["scenario"]["load"]["standardized"]["concurrency"] == level["users"]
        ttft = aggregate["latency"]["time_to_first_token"]
        assert ttft["units"] == "s" and ttft["p50"] == pytest.approx(level["ttft_p50_s"])
        assert aggregate["latency"]["request_latency"]["p99"] == pytest.approx(level["e2e_p99_s"])
        rates = aggregate["throughput"]
        assert rates["output_token_rate"]["mean"] == pytest.approx(level["output_tokens_per_s"])
        assert rates["request_rate"]["mean"] == pytest.approx(level["requests_per_s"])
        assert aggregate["requests"]["total"] == level["requests"]


def test_a_report_in_milliseconds_reads_as_seconds(tmp_path):
    report = {
        "version": "0.2.1",
        "run": {"uid": "u", "eid": "e"},
        "scenario": {"load": {"standardized": {"concurrency": 16}}},
        "results": {
            "request_performance": {
                "aggregate": {
                    "requests": {"total": 100, "failures": 2},
                    "latency": {"time_to_first_token": {"units": "ms", "mean": 120, "p50": 110, "p99": 300}},
                    "throughput": {"output_token_rate": {"units": "tokens/s", "mean": 2500.0}},
                }
            }
        },
    }
    path = tmp_path / "br.json"
    path.write_text(json.dumps(report))
    assert llmd.report_files(tmp_path) == [path]
    (level,) = llmd.read_reports([path])[0].to_dict("records")
    assert level["users"] == 16 and level["ttft_p50_s"] == pytest.approx(0.11) and level["ttft_p99_s"] == 0.3
    assert level["output_tokens_per_s"] == 2500.0 and level["requests"] == 100 and level["failures"] == 2


def test_compare_reads_a_runs_benchmark_reports_as_its_baseline(reports, tmp_path, capsys):
    folder = tmp_path / "reports"
    folder.mkdir()
    for users, report in reports.items():
        (folder / f"users-{users}.json").write_text(json.dumps(report))
    code, _, err = run_cli(capsys, "compare", "--baseline", folder, "--candidate", RUN, "--out", tmp_path / "cmp")
    assert code == 0, err
    compared = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    ttft = [d for d in compared["differences"] if d["metric"] == "ttft_p50"]
    assert [d["users"] for d in ttft] == sorted(reports)
    assert all(d["change"] == pytest.approx(0, abs=1e-9) for d in ttft)
