"""The command line, the output files and their contract, and one-line errors on bad input."""

import json
import re

import pandas as pd
import pytest

from tests.helpers import run_cli, small_run
from vllm_stress.analysis.cli import main

CONTRACT_LEVEL_KEYS = {
    "users",
    "requests",
    "failures",
    "success_rate",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "requests_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "e2e_p50_s",
    "e2e_p99_s",
}


def test_outputs_and_summary_contract(tmp_path, capsys, figures):
    run = small_run(tmp_path / "run")
    code, out, _ = run_cli(capsys, run, "--out", tmp_path / "out", "--gpus", "2", "--slo", "ttft=2s,e2e=1500ms")
    assert code == 0 and "report.md" in out
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"report.md", "report.html", "summary.json", "throughput.png", "latency.png", "tradeoff.png"} <= files
    assert all((tmp_path / "out" / name).read_bytes()[:4] == b"\x89PNG" for name in files if name.endswith(".png"))
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["runs"] == 1 and summary["saturation_users"] == 10
    assert summary["peak"] == pytest.approx(
        {
            "users": 10,
            "output_tokens_per_s": 160.0,  # 8 users x 100 tokens / 5 s
            "total_tokens_per_s": 160.0 + 8 * 2048 / 5,
            "requests_per_s": 8 / 5,
            "e2e_p99_s": 5.0,
            "output_tokens_per_s_per_gpu": 80.0,
            "total_tokens_per_s_per_gpu": (160.0 + 8 * 2048 / 5) / 2,
        }
    )
    assert all(CONTRACT_LEVEL_KEYS <= set(level) for level in summary["levels"])
    assert summary["slo"] == {"ttft": 2.0, "e2e": 1.5}
    assert summary["levels"][0]["goodput_ratio"] == 0.0  # every e2e is 5 s > 1.5 s


def test_no_figures_writes_the_report_without_them(tmp_path, capsys, figures):
    """--no-figures wins over the environment's default (drawn, here): no PNG, and the report says why."""
    code, _, _ = run_cli(capsys, small_run(tmp_path / "run"), "--out", tmp_path / "out", "--no-figures")
    assert code == 0 and not list((tmp_path / "out").glob("*.png"))
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Plots\n\nNot drawn: this report was written with --no-figures" in report and "![" not in report
    assert "<img" not in (tmp_path / "out" / "report.html").read_text()


def test_html_is_self_contained(tmp_path, capsys, figures):
    run_cli(capsys, small_run(tmp_path / "run"), "--out", tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 5 and all(s.startswith("data:image/png;base64,") for s in sources)  # with the Pareto plot
    assert "<table>" in page and "href=" not in page


def test_labels_group_repeats_and_compare_configs(tmp_path, capsys):
    a1, a2 = small_run(tmp_path / "a1"), small_run(tmp_path / "a2", loops=(5, 9))
    b1 = small_run(tmp_path / "b1", model="other", loops=(2, 2))
    code, _, err = run_cli(
        capsys,
        "--label",
        f"A={a1},{a2}",
        "--label",
        f"B={b1}",
        "--gpus",
        "8",
        "--gpus",
        "B=4",
        "--scaling",
        "5:10",
        "--out",
        tmp_path / "out",
    )
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(summary["configs"]) == ["A", "B"] and "levels" not in summary
    config_a, config_b = summary["configs"]["A"], summary["configs"]["B"]
    assert config_a["runs"] == 2 and config_a["levels"][1]["output_tokens_per_s"] == pytest.approx(170.0)
    assert config_a["gpus"] == 8 and config_b["gpus"] == 4
    assert config_a["scaling"] == {"from": 5, "to": 10, "factor": pytest.approx(1.7)}
    assert "| Metric | A | B |" in (tmp_path / "out" / "report.md").read_text()


def test_default_labels_come_from_run_json(tmp_path, capsys):
    dirs = [small_run(tmp_path / "x"), small_run(tmp_path / "y"), small_run(tmp_path / "z", model="other")]
    run_cli(capsys, *dirs, "--out", tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {label: c["runs"] for label, c in summary["configs"].items()} == {"m": 2, "other": 1}


def test_partial_run_is_reported(tmp_path, capsys):
    run = small_run(tmp_path / "run", complete=False)
    run_cli(capsys, run, "--out", tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["partial"] is True and summary["partial_runs"] == [str(run)]
    assert "## Partial runs" in (tmp_path / "out" / "report.md").read_text()


def test_run_where_every_request_failed_still_reports(tmp_path, capsys):
    run = small_run(tmp_path / "run")
    rows = pd.read_csv(run / "requests.csv")
    rows[["ok", "error", "prompt_tokens", "completion_tokens", "ttft_s", "tpot_s", "chunks"]] = [
        0,
        "Timeout",
        None,
        None,
        None,
        None,
        0,
    ]  # timed out before any output
    rows.to_csv(run / "requests.csv", index=False)
    (run / "locust_failures.csv").write_text(
        "Method,Name,Error,Occurrences,First Seen,Last Seen\nPOST,chat,Timeout,156,,\n"
    )
    (run / "locust_exceptions.csv").write_text('Count,Message,Traceback,Nodes\n2,boom,"tb",local\n')
    code, _, err = run_cli(capsys, run, "--out", tmp_path / "out")
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [level["success_rate"] for level in summary["levels"]] == [0.0, 0.0]
    assert summary["peak"] is None and summary["scaling"]["factor"] is None  # nothing measured: nothing steady
    assert [level["steady_reason"] for level in summary["levels"]] == [
        "no measured request of the level ended in the window"
    ] * 2
    assert summary["errors"] == {"Timeout": 156} and summary["locust_exceptions"] == 2  # (5 + 8) users x 60 s / 5 s
    report = (tmp_path / "out" / "report.md").read_text()
    assert "- Timeout: 156 (locust_failures.csv)" in report and "unhandled exceptions in Locust tasks: 2" in report
    assert "no level reached a steady state" in report


def test_half_written_last_line_of_a_killed_run_is_dropped(tmp_path, capsys):
    run = small_run(tmp_path / "run", complete=False)
    with open(run / "requests.csv", "a") as requests:
        requests.write("1700000100.5,17000")
    code, _, err = run_cli(capsys, run, "--out", tmp_path / "out")
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    note = f"{run}: requests.csv line {len(pd.read_csv(run / 'requests.csv')) + 1}: half-written (its writer was killed), left out"
    assert summary["partial"] is True and summary["input_notes"] == [note]
    assert f"- {note}" in (tmp_path / "out" / "report.md").read_text()


def break_columns(folder):
    rows = pd.read_csv(folder / "requests.csv").drop(columns=["end_time", "ttft_s"])
    rows.to_csv(folder / "requests.csv", index=False)


def empty_rows(folder):
    pd.read_csv(folder / "requests.csv").iloc[:0].to_csv(folder / "requests.csv", index=False)


def unknown_level(folder):
    rows = pd.read_csv(folder / "requests.csv")
    rows.loc[3, "users"] = 7
    rows.to_csv(folder / "requests.csv", index=False)


def text_in_numbers(folder):
    rows = pd.read_csv(folder / "requests.csv")
    rows["start_time"] = rows["start_time"].astype(str)
    rows.loc[2, "start_time"] = "soon"
    rows.to_csv(folder / "requests.csv", index=False)


@pytest.mark.parametrize(
    ("damage", "file_name", "message"),
    [
        (break_columns, "requests.csv", "missing column(s) end_time, ttft_s"),
        (empty_rows, "requests.csv", "empty run"),
        (unknown_level, "requests.csv", "unknown level(s) users=[7]"),
        (text_in_numbers, "requests.csv", "column start_time is not numeric (line 4: 'soon')"),
        (lambda folder: (folder / "levels.csv").write_text("users,hold_start\n5,1\n"), "levels.csv", "hold_end"),
        (lambda folder: (folder / "run.json").write_text("{"), "run.json", "not valid JSON"),
        (lambda folder: (folder / "requests.csv").unlink(), "requests.csv", "file missing"),
        (lambda folder: (folder / "requests.csv").write_text("x\n"), "requests.csv", "missing column(s) start_time"),
        (lambda folder: (folder / "requests.csv").write_bytes(b""), "requests.csv", "not a readable CSV"),
    ],
)
def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys, damage, file_name, message):
    run = small_run(tmp_path / "run")
    damage(run)
    code, _, err = run_cli(capsys, run, "--out", tmp_path / "out")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {run / file_name}: ") and message in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "ttft=fast"], "--slo: 'ttft=fast' is not NAME=LIMIT"),
        (["--slo", "latency=2s"], "--slo: latency=2s is not a per-request latency limit"),
        (["--scaling", "5:20"], "--scaling: level 20 not measured for m (levels [5, 10])"),
        (["--gpus", "x=0"], "--gpus: 'x=0'"),
        (["--label", "a", "--label", "b=x"], "--label:"),
    ],
)
def test_bad_options_are_one_line(tmp_path, capsys, args, message):
    code, _, err = run_cli(capsys, small_run(tmp_path / "run"), "--out", tmp_path / "out", *args)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_not_a_folder(tmp_path, capsys):
    code, _, err = run_cli(capsys, tmp_path / "nowhere", "--out", tmp_path / "out")
    assert code == 2 and err == f"error: {tmp_path / 'nowhere'}: not a folder\n"


def test_help_documents_labels(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "NAME=DIR[,DIR...]" in capsys.readouterr().out
