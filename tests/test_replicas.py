"""python -m scenarios plan --target-rate: the replicas, GPUs and dollars an hour a rate takes, from a synthetic
run's report (its peak, or its level meeting --slo) and from an SLO search folder written by the search's own judge
and writer (docs/concepts/scenarios.md, section 6)."""

import json
import math

import pandas as pd
import pytest

from tests.helpers import LEVELS, run_cli, small_run
from vllm_stress.analysis.io.synthetic import closed_loop_rows, write_run
from vllm_stress.core.formats import FORMAT_VERSION
from vllm_stress.core.schema import FORMAT_KEY, SUMMARY_JSON
from vllm_stress.scenarios.cli import main
from vllm_stress.scenarios.search.judge import judge, parse_slos
from vllm_stress.scenarios.search.run import write
from vllm_stress.scenarios.search.space import Space


def plan(capsys, *args) -> tuple[int, str, str]:
    """``python -m scenarios plan ARGS`` in this process: its exit code, stdout and stderr."""
    code = main(["plan", *(str(a) for a in args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def report(tmp_path, capsys, *args):
    """small_run's report (level 5: 1 req/s and 100 output tok/s; level 10: 1.6 req/s and 160 tok/s)."""
    out = tmp_path / "report"
    code, _, err = run_cli(capsys, small_run(tmp_path / "run"), "--out", out, *args)
    assert code == 0, err
    return out


def test_replicas_gpus_and_cost_from_the_reports_peak(tmp_path, capsys):
    out = report(tmp_path, capsys, "--gpus", "4", "--gpu-hour-price", "2.5")
    code, lines, err = plan(capsys, "--target-rate", "300req/s", "--from-report", out, "--headroom", "0.2")
    assert code == 0, err
    assert math.ceil(300 * 1.2 / 1.6) == 225
    assert lines.splitlines() == [
        f"source: {out}, config m: 10 users, the peak steady level (no --slo): 1.60 req/s, 160.00 tok/s per replica",
        "target: 300.00 req/s x (1 + 0.2 headroom) = 360.00 req/s",
        "replicas: ceil(360.00 / 1.60 req/s per replica) = 225",
        "GPUs: 225 replicas x 4 GPUs each = 900",
        "cost: 900 GPUs x $2.50 per GPU-hour = $2,250.00 an hour",
    ]
    code, lines, err = plan(capsys, "--target-rate", "2,000 tok/s", "--from-report", out, "--gpus", "1",
                            "--gpu-hour-price", "3")  # fmt: skip
    assert code == 0, err  # 2,000 / 160 = 12.5: 13 replicas of one GPU at $3
    assert lines.splitlines()[2:] == [
        "replicas: ceil(2,000.00 / 160.00 tok/s per replica) = 13",
        "GPUs: 13 replicas x 1 GPUs each = 13",
        "cost: 13 GPUs x $3.00 per GPU-hour = $39.00 an hour",
    ]


def test_the_level_meeting_the_slo_and_without_gpus_no_cost(tmp_path, capsys):
    parts = [
        closed_loop_rows(users, ramp_start, hold_end, e2e, completion_tokens=100)
        for (users, ramp_start, _, hold_end), e2e in zip(LEVELS, (2.0, 5.0), strict=True)
    ]  # level 5: 2 s requests, 2.5 req/s; level 10: 5 s requests, 2 req/s
    run = write_run(tmp_path / "run", pd.concat(parts), LEVELS, meta={"model": "m"})
    code, _, err = run_cli(capsys, run, "--out", tmp_path / "report", "--slo", "e2e=3s")
    assert code == 0, err
    code, lines, err = plan(capsys, "--target-rate", "10req/s", "--from-report", tmp_path / "report")
    assert code == 0, err
    assert lines.splitlines()[0].endswith(
        "5 users, the level with the most users where 99.0 % of requests met the SLO (e2e ≤ 3.00 s): "
        "2.50 req/s, 250.00 tok/s per replica"
    )
    assert lines.splitlines()[2:] == [
        "replicas: ceil(10.00 / 2.50 req/s per replica) = 4",
        "GPUs and cost: give --gpus (GPUs per replica)",
    ]
    code, _, err = run_cli(capsys, run, "--out", tmp_path / "strict", "--slo", "e2e=1s")
    assert code == 0, err
    code, _, err = plan(capsys, "--target-rate", "10req/s", "--from-report", tmp_path / "strict")
    assert code == 2 and err == (
        f"error: {tmp_path / 'strict'}, config m: no level had 99.0 % of its requests meet the SLO (e2e ≤ 1.00 s)\n"
    )


def test_a_source_level_that_was_not_steady_is_refused(tmp_path, capsys):
    (users, ramp_start, hold_start, _), (_, next_ramp, _, _) = LEVELS
    levels = [LEVELS[0], (10, next_ramp, next_ramp + 10, next_ramp + 18)]  # level 10 held 8 s: under 3 lifetimes
    parts = [closed_loop_rows(users, start, end, 5.0, completion_tokens=100) for users, start, _, end in levels]
    run = write_run(tmp_path / "run", pd.concat(parts), levels, meta={"model": "m"})
    code, _, err = run_cli(capsys, run, "--out", tmp_path / "report", "--slo", "e2e=6s")
    assert code == 0, err
    code, out, err = plan(capsys, "--target-rate", "300req/s", "--from-report", tmp_path / "report")
    assert code == 2 and not out and len(err.splitlines()) == 1
    assert err.startswith(f"error: {tmp_path / 'report'}, config m: 10 users (the level with the most users where")
    assert "was not steady (" in err and err.endswith("its rate is a transient's, not a capacity\n")


def test_an_slo_search_folder_plans_from_its_answer(tmp_path, capsys):
    (level,) = [row for row in LEVELS if row[0] == 5]
    run_dir = tmp_path / "search" / "probe-5" / "run-1"
    write_run(run_dir, closed_loop_rows(5, level[1], level[3], 5.0, completion_tokens=100), [level], meta={})
    slos, space = parse_slos("e2e_p99=6s"), Space("users", 1, 64, 0.1)
    write(tmp_path / "search", "smoke", slos, {5: judge([run_dir], 5, 5, slos, space)}, space, repeats=1)
    code, lines, err = plan(capsys, "--target-rate", "300req/s", "--from-report", tmp_path / "search",
                            "--headroom", "0.2", "--gpus", "8", "--gpu-hour-price", "2")  # fmt: skip
    assert code == 0, err
    assert lines.splitlines() == [
        f"source: {tmp_path / 'search'}: 5 users, the SLO search's answer (e2e_p99 ≤ 6000 ms): 1.00 req/s, "
        "100.00 tok/s per replica",
        "target: 300.00 req/s x (1 + 0.2 headroom) = 360.00 req/s",
        "replicas: ceil(360.00 / 1.00 req/s per replica) = 360",
        "GPUs: 360 replicas x 8 GPUs each = 2880",
        "cost: 2880 GPUs x $2.00 per GPU-hour = $5,760.00 an hour",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-rate", "300", "--from-report", "DIR"], "--target-rate: '300' is not a positive rate in req/s"),
        (["--target-rate", "300req/s"], "plan --target-rate R needs --from-report DIR"),
        (["--target-rate", "1req/s", "--from-report", "DIR"], "no summary.json (a report) or search.json"),
        (["--target-rate", "1req/s", "--from-report", "DIR", "--headroom", "-1"], "must not be negative"),
    ],
)
def test_what_the_replica_plan_refuses(tmp_path, capsys, args, message):
    code, _, err = plan(capsys, *(str(tmp_path) if arg == "DIR" else arg for arg in args))
    assert code == 2 and message in err and len(err.splitlines()) == 1


def test_a_report_of_a_newer_format_is_refused_in_one_line(tmp_path, capsys):
    out = report(tmp_path, capsys)
    summary = json.loads((out / SUMMARY_JSON).read_text())
    (out / SUMMARY_JSON).write_text(json.dumps({**summary, FORMAT_KEY: FORMAT_VERSION + 1}))
    code, _, err = plan(capsys, "--target-rate", "1req/s", "--from-report", out)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"format {FORMAT_VERSION + 1} is newer than this vllm-stress reads" in err
