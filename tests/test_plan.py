"""python -m scenarios plan: worker processes and machines from the client's CPU per token, checked against a run."""

import csv
import re

import pandas as pd

from tests.helpers import analyse
from vllm_stress.analysis.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.core import schema
from vllm_stress.core.sizing import CLIENT_CPU_US_PER_TOKEN, machine_processes, worker_processes
from vllm_stress.scenarios.cli import main
from vllm_stress.scenarios.plan import check_run


def test_plan_sizes_1000_streams_at_20_and_50_tokens_per_s(capsys):
    assert main(["plan", "--users", "1000", "--tokens-per-s-per-stream", "20", "--cores-per-machine", "2"]) == 0
    assert "worker processes: 1 " in capsys.readouterr().out  # 20,000 tok/s x 24.4 us = 0.49 cores
    assert main(["plan", "--users", "1000", "--tokens-per-s-per-stream", "50", "--cores-per-machine", "2"]) == 0
    out = capsys.readouterr().out
    assert "= 1.22 cores" in out and "worker processes: 3 " in out and "worker machines: 2 with 2 cores" in out
    assert main(["plan", "--users", "1000"]) == 2  # a rate is needed


def test_plan_gives_one_worker_count_in_every_line(capsys):
    """The process count, the worker machines' --processes and the master's --expect-workers agree; never -1."""
    for rate, cores, processes, per_machine in ((20, 2, 1, [1]), (50, 2, 3, [2, 1]), (200, 8, 10, [8, 2])):
        assert (
            main(["plan", "--users", "1000", "--tokens-per-s-per-stream", str(rate), "--cores-per-machine", str(cores)])
            == 0
        )
        out = capsys.readouterr().out
        assert f"worker processes: {processes} " in out and f"--workers {processes}" in out
        assert sorted(int(n) for n in re.findall(r"--processes (-?\d+)", out)) == sorted(set(per_machine))
        assert f"--expect-workers {processes}\n" in out and "-1" not in out
        assert machine_processes(processes, cores) == per_machine


def test_worker_processes_keep_each_under_the_timing_limit():
    for tokens_per_s in (1, 10_000, 20_491, 20_492, 50_000, 500_000):
        processes = worker_processes(tokens_per_s)
        share = tokens_per_s * CLIENT_CPU_US_PER_TOKEN / 1e6 / processes
        assert share <= 0.5 and (processes == 1 or tokens_per_s * CLIENT_CPU_US_PER_TOKEN / 1e6 / (processes - 1) > 0.5)


def write_csv(path, columns, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([columns, *rows])


def test_check_run_reads_tokens_and_worker_cpu_per_level(tmp_path):
    write_csv(tmp_path / schema.LEVELS_FILE, ["users", "ramp_start", "hold_start", "hold_end"], [[10, 0, 100, 110]])
    row = dict.fromkeys(schema.REQUEST_COLUMNS, "")
    requests = [{**row, "users": 10, "end_time": 100 + i, "chunks": 2000} for i in range(10)]  # 2,000 tokens/s
    requests.append({**row, "users": 10, "end_time": 120, "chunks": 10**6})  # after the hold: not counted
    write_csv(tmp_path / schema.REQUESTS_FILE, schema.REQUEST_COLUMNS, [list(r.values()) for r in requests])
    write_csv(
        tmp_path / schema.CLIENT_HEALTH_FILE,
        schema.CLIENT_HEALTH_COLUMNS,
        [
            [105, 10, "w1", 3.0, 1.0],
            [108, 10, "w1", 5.0, 1.0],
            [108, 10, "w2", 1.0, 1.0],
            [108, 10, "master", 50.0, 1.0],
        ],
    )
    lines = check_run(tmp_path).splitlines()
    assert lines[1] == "10 | 2,000 | 2 | 5 %, 4 % | 25.0 | 1"  # (4 + 1) % of a core over 2,000 tok/s = 25 us


def test_report_says_how_many_workers_a_client_bound_level_needed(tmp_path):
    levels = step_levels([10, 100], hold_s=60)
    rows = pd.concat(
        [
            closed_loop_rows(users, hold - 10, end, 2.0, completion_tokens=512, worker="w1")
            for users, _, hold, end in levels
        ]
    )
    folder = write_run(tmp_path / "run", rows, levels)
    (_, _, _, end_10), (_, _, hold_100, end_100) = levels
    health = [
        (end_10 - 5, 10, "w1", 40.0, 1.0, 2.0),
        (hold_100, 100, "w1", 40.0, 1.0, 2.0),
        (end_100 - 5, 100, "w1", 97.0, 1.0, 2.0),
    ]
    pd.DataFrame(health, columns=schema.CLIENT_HEALTH_COLUMNS).to_csv(folder / schema.CLIENT_HEALTH_FILE, index=False)
    summary = analyse(folder, tmp_path / "report")
    level = {level["users"]: level for level in summary["levels"]}[100]
    needed = worker_processes(level["output_tokens_per_s"])  # 100 users x 256 tok/s = 25,600 tok/s: 2 processes
    assert needed == 2
    report = (tmp_path / "report" / "report.md").read_text()
    assert (
        f"100 users: a load generator at 97 % CPU; {level['output_tokens_per_s']:,.0f} output tok/s need 2 worker "
        "processes" in report
    )
    assert "10 users: a load generator" not in report
