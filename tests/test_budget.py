"""--max-minutes end to end: `vllm-stress run` with a budget shorter than its ramp cuts the levels and the repeats that
no longer fit, says why, and still writes the report of what ran (the shape's rule: test_shape.py)."""

import csv
import logging
import re

from vllm_stress.scenarios.run import budget

LEVELS = "2,3,4,5,6,7,8,9"  # smoke's levels take at least 6 s each (1 s ramp, 1 s warm-up, 4 s hold): 48 s or more


def test_a_budget_cuts_levels_and_repeats_and_the_report_is_still_written(
    scenarios, tmp_path, monkeypatch, caplog, capfd
):
    # the whole budget for the runs: 18 s, all of it the first run's (a level or two held, on a loaded machine too);
    # the second, after the first run's start, ramp and stop, has less than 18 s left and is cut
    monkeypatch.setattr(budget, "REPORT_RESERVE_S", 0.0)
    monkeypatch.setattr(budget, "LEAST_RUN_S", 18.0)
    caplog.set_level(logging.INFO, logger="scenarios")
    out = tmp_path / "out"
    argv = ["run", "--scenario", "smoke", "--levels", LEVELS, "--repeats", "2", "--max-minutes", "0.3"]
    assert scenarios([*argv, "--out", str(out)]) == 0
    with (out / "run-1" / "levels.csv").open() as f:
        held = [int(row["users"]) for row in csv.DictReader(f)]
    assert held and held == sorted(held) and len(held) < len(LEVELS.split(","))
    assert not (out / "run-2").exists()
    assert (out / "report" / "report.md").is_file()
    assert "time budget 0.3 min (--max-minutes): 0.3 for the runs, then the report, by " in caplog.text
    assert "run 2 of 2 cut: 0." in caplog.text
    # the Locust master's console: the first level cut, and those after it, with the time used
    first_cut = LEVELS.split(",")[len(held)]
    assert re.search(rf"levels {first_cut}, [\d, ]*9 cut: 0\.\d of 0\.\d+ min used", capfd.readouterr().err)
