"""vllm_stress.analysis.compare.compare_report: the comparison's figures, verdict lines, report blocks and compare.json,
on comparisons built by hand."""

import json
import math

import pandas as pd
import pytest

from vllm_stress.analysis.compare.compare import Comparison, Difference, Side
from vllm_stress.analysis.compare.compare_report import (
    COMPARE_HTML,
    COMPARE_JSON,
    COMPARE_MD,
    figure,
    report_blocks,
    verdict_line,
    write_report,
)
from vllm_stress.analysis.io.load import AnalysisError
from vllm_stress.analysis.report.render import Heading, Paragraph, Table, to_markdown


def difference(users: int, metric: str, baseline: float, candidate: float, **changes) -> Difference:
    """A steady, single-run difference; ``changes`` override any field."""
    fields = {
        "users": users,
        "metric": metric,
        "baseline": baseline,
        "candidate": candidate,
        "baseline_runs": 1,
        "candidate_runs": 1,
        "change": candidate - baseline,
        "relative": (candidate - baseline) / baseline,
        "ci95": None,
        "test": "minimum effect 10%",
        "significant": True,
        "gated": True,
        "crossed": [],
    }
    return Difference(**(fields | changes))


def levels(*users: int) -> pd.DataFrame:
    """Aggregated levels with throughput and p99 latencies to plot."""
    return pd.DataFrame(
        {
            "users": list(users),
            "output_tokens_per_s": [100.0 * u for u in users],
            "total_tokens_per_s": [1000.0 * u for u in users],
            "ttft_p99_s": [0.1] * len(users),
            "e2e_p99_s": [1.0] * len(users),
            "steady": [True] * len(users),
        }
    ).set_index("users")


def comparison(diffs: list[Difference], ungated=None, servers=((), ()), only_baseline=()) -> Comparison:
    users = sorted({d.users for d in diffs})
    return Comparison(
        Side(["base/run-1"], levels(*users, *only_baseline), list(servers[0])),
        Side(["cand/run-1", "cand/run-2"], levels(*users), list(servers[1])),
        ["output_tok_s<-5%"],
        diffs,
        ungated or {},
    )


@pytest.mark.parametrize(
    ("metric", "value", "text"),
    [
        ("output_tok_s", 29751.4, "29,751"),
        ("req_s", 1234.567, "1,234.57"),
        ("e2e_p99", 12.3456, "12,345.6 ms"),
        ("ttft_p50", 0.00456, "4.56 ms"),
        ("tpot_p99", 0.01, "10.0 ms"),
        ("ttft_p99", math.nan, "-"),
        ("e2e_p50", None, "-"),
    ],
)
def test_figures_are_in_the_metrics_units(metric, value, text):
    assert figure(metric, value) == text


def test_a_verdict_line_names_the_change_its_interval_and_the_limits():
    diff = difference(
        10, "output_tok_s", 200.0, 160.0, ci95=12.4, test="Welch t", crossed=["output_tok_s<-5%", "output_tok_s<-1%"]
    )
    assert verdict_line(diff) == (
        "10 users: output_tok_s 200 -> 160 (-20.0 %, 95 % CI of the change ±12; Welch t) crosses "
        "output_tok_s<-5%, output_tok_s<-1%"
    )


def test_regressions_come_first_and_limits_that_do_not_gate_apart():
    regression = difference(10, "output_tok_s", 200.0, 160.0, crossed=["output_tok_s<-5%"])
    noisy = difference(5, "output_tok_s", 100.0, 94.0, significant=False, crossed=["output_tok_s<-5%"])
    markdown = to_markdown(report_blocks(comparison([noisy, regression]), {}))
    assert markdown.index("## Regressions") < markdown.index("## Limits crossed that do not gate")
    noise = "- 5 users: output_tok_s 100 -> 94 (-6.0 %; minimum effect 10%) crosses output_tok_s<-5%: within the noise"
    assert noise in markdown
    assert markdown.index("## 5 users") < markdown.index("## 10 users") < markdown.index("## Method")


def test_without_a_regression_the_limits_given_are_named():
    blocks = report_blocks(comparison([difference(5, "e2e_p50", 1.0, 1.01, significant=False)]), {})
    assert Paragraph("No --fail-on limit (output_tok_s<-5%) crossed outside the noise at a steady level.") in blocks


def test_an_ungated_level_says_why_and_one_sided_levels_are_listed():
    diff = difference(8, "req_s", 2.0, 1.0, gated=False, crossed=["req_s<-5%"])
    blocks = report_blocks(comparison([diff], ungated={8: "candidate not steady (too short)"}, only_baseline=(16,)), {})
    assert Heading("8 users (ungated)") in blocks
    assert Paragraph("Ungated: candidate not steady (too short).") in blocks
    assert Paragraph("Levels on one side only (not compared): baseline [16].") in blocks
    (table,) = [block for block in blocks if isinstance(block, Table)]
    assert table.rows == [["req_s", "2.00", "1.00", "-50.0 %", "-", "minimum effect 10%", "yes", "req_s<-5%"]]


def test_differing_servers_are_named_and_equal_ones_are_not():
    diffs = [difference(5, "output_tok_s", 100.0, 100.0)]
    differing = report_blocks(comparison(diffs, servers=(["version 1"], ["version 2", "version 3"])), {})
    assert Paragraph("The servers differ: baseline version 1; candidate version 2 / version 3.") in differing
    same = report_blocks(comparison(diffs, servers=(["version 1"], ["version 1"])), {})
    assert not any(isinstance(b, Paragraph) and b.text.startswith("The servers differ") for b in same)


def test_write_report_writes_the_three_files_and_the_plots(tmp_path):
    regression = difference(10, "output_tok_s", 200.0, 160.0, crossed=["output_tok_s<-5%"])
    write_report(comparison([regression, difference(10, "e2e_p99", 1.0, 1.0)]), tmp_path / "cmp")
    files = {path.name for path in (tmp_path / "cmp").iterdir()}
    assert files == {COMPARE_MD, COMPARE_HTML, COMPARE_JSON, "throughput.png", "latency.png"}
    document = json.loads((tmp_path / "cmp" / COMPARE_JSON).read_text())
    assert list(document) == [
        "fail_on",
        "ungated",
        "servers",
        "baseline",
        "candidate",
        "differences",
        "pricing",
        "costs",
        "regressions",
    ]
    assert document["pricing"] is None and document["costs"] == []  # no --gpu-hour-price
    assert document["candidate"] == {"sources": ["cand/run-1", "cand/run-2"]} and document["regressions"] == 1
    assert [d["regression"] for d in document["differences"]] == [True, False]
    assert document["differences"][0]["crossed"] == ["output_tok_s<-5%"]


def test_write_report_refuses_a_file_as_its_folder(tmp_path):
    (tmp_path / "taken").write_text("")
    with pytest.raises(AnalysisError, match="not a folder"):
        write_report(comparison([difference(5, "req_s", 1.0, 1.0)]), tmp_path / "taken")
