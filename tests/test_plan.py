"""python -m scenarios plan: worker processes and machines from the client's CPU per token, checked against a run."""

import re

import numpy as np
import pandas as pd
import pytest

from tests.helpers import analyse
from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.core import schema
from vllm_stress.core.sizing import CLIENT_CPU_US_PER_TOKEN, machine_processes, worker_processes
from vllm_stress.scenarios.cli import main
from vllm_stress.scenarios.studies.plan import check_run


def test_plan_sizes_1000_streams_at_10_and_40_tokens_per_s(capsys):
    assert main(["plan", "--users", "1000", "--tokens-per-s-per-stream", "10", "--cores-per-machine", "2"]) == 0
    assert "worker processes: 1 " in capsys.readouterr().out  # 10,000 tok/s x 31.5 us = 0.32 cores
    assert main(["plan", "--users", "1000", "--tokens-per-s-per-stream", "40", "--cores-per-machine", "2"]) == 0
    out = capsys.readouterr().out  # 40,000 tok/s x 31.5 us = 1.26 cores, x 25.5 us = 1.02 against the simulator
    assert "= 1.26 cores (1.02 against the simulator" in out and "worker processes: 3 " in out
    assert "worker machines: 2 with 2 cores" in out
    assert main(["plan", "--users", "1000"]) == 2  # a rate is needed


def test_plan_gives_one_worker_count_in_every_line(capsys):
    """The process count, the worker machines' --processes and the master's --expect-workers agree; never -1."""
    for rate, cores, processes, per_machine in ((10, 2, 1, [1]), (40, 2, 3, [2, 1]), (200, 8, 13, [8, 5])):
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
    for tokens_per_s in (1, 10_000, 15_873, 15_874, 50_000, 500_000):
        processes = worker_processes(tokens_per_s)
        share = tokens_per_s * CLIENT_CPU_US_PER_TOKEN / 1e6 / processes
        assert share <= 0.5 and (processes == 1 or tokens_per_s * CLIENT_CPU_US_PER_TOKEN / 1e6 / (processes - 1) > 0.5)


def health_rows(levels, values):
    """client_health.csv rows: a sample every 3 s from the first ramp to the last hold's end for each worker, with the
    level of its time and CPU ``values[worker](time)``."""
    times = np.arange(levels[0][1], levels[-1][3] + 3, 3.0)
    users = [max(level[0] for level in levels if level[1] <= time) for time in times]
    return [
        (time, n, worker, cpu(time), 1.0, 2.0, 300.0)
        for time, n in zip(times, users, strict=True)
        for worker, cpu in values.items()
    ]


def test_report_and_plan_agree_on_the_same_run(tmp_path):
    """Users in near step with requests of 8 s, so crediting a request's tokens at its end (597 tok/s at 40 users)
    would not give the report's spread (643); w1's sample that spans the hold's start is its busiest, so skipping the
    hold's first seconds of samples would not count what the report's maximum counts."""
    levels = step_levels([10, 40], hold_s=60)
    rows = pd.concat(
        [closed_loop_rows(users, ramp, end, 8.0, spread=0.25, worker="w1") for users, ramp, _, end in levels]
    )
    folder = write_run(tmp_path / "run", rows, levels)
    (_, _, _, end_10), (_, _, hold_40, end_40) = levels
    first_in_40 = hold_40 + 3 - (hold_40 - levels[0][1]) % 3  # w1's first sample after hold_start: spans it
    values = {
        "w1": lambda time: 90.0 if time == first_in_40 else 40.0 if time < end_10 + 3 else 50.0,
        "w2": lambda _: 20.0,
        "master": lambda _: 30.0,  # the master's own: not in plan's worker CPU
    }
    health = pd.DataFrame(health_rows(levels, values), columns=schema.CLIENT_HEALTH_COLUMNS)
    health.to_csv(folder / schema.CLIENT_HEALTH_FILE, index=False)
    summary = analyse(folder, tmp_path / "report")
    report = {level["users"]: level for level in summary["levels"]}
    plan_lines = {int(line.split(" | ")[0]): line.split(" | ") for line in check_run(folder).splitlines()[1:]}
    assert sorted(plan_lines) == [10, 40]
    for users in (10, 40):
        tokens_per_s = report[users]["output_tokens_per_s"]
        assert tokens_per_s == pytest.approx(users * 512 / 8, rel=0.05)  # 512 tokens per 8 s cycle and user
        assert plan_lines[users][1] == f"{tokens_per_s:,.0f}"
    samples_40 = [time for time in np.arange(levels[0][1], end_40 + 3, 3.0) if hold_40 < time and time - 3 < end_40]
    w1_mean = (90.0 + 50.0 * (len(samples_40) - 1)) / len(samples_40)  # the straddling sample is counted by both
    assert plan_lines[40][2:4] == ["2", f"{w1_mean + 20:.0f} %, {w1_mean:.0f} %"]
    assert report[40]["client_cpu_max_percent"] == 90.0
    assert plan_lines[10][3] == "60 %, 40 %"


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
        (end_10 - 5, 10, "w1", 40.0, 1.0, 2.0, 300.0),
        (hold_100, 100, "w1", 40.0, 1.0, 2.0, 300.0),
        (end_100 - 5, 100, "w1", 97.0, 1.0, 2.0, 300.0),
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


def test_plan_gives_memory_descriptors_and_the_masters_share_from_the_measured_figures(capsys):
    """20,000 slow streams: four workers by the streams one held (not one by CPU), 5,000 x 36 KiB each, and
    20,000 x 0.25 / 8 = 625 rows/s for the master at 23.4 us a row (1.5 % of a core)."""
    args = ["plan", "--users", "20000", "--tokens-per-s-per-stream", "0.25", "--output-tokens", "8"]
    assert main([*args, "--cores-per-machine", "2"]) == 0
    out = capsys.readouterr().out
    assert "worker processes: 4 " in out and "5,000 streams x 36 KiB = 176 MiB" in out
    assert "master: 625 rows/s x 23.4 us = 1 % of a core" in out
    assert "31.5 us per token against a server writing each token on its own" in out  # x 5,000 tok/s
    assert "= 0.16 cores (0.13 against the simulator, 25.5 us per token)" in out
    assert "open streams: 20,000 x 8.1 us per second = 0.16 cores more" in out
