"""Helpers of the analysis tests (not a test module): a small synthetic run and the command line's output."""

import pandas as pd

from vllm_stress.analysis.cli import main
from vllm_stress.analysis.synthetic import closed_loop_rows, step_levels, write_run

LEVELS = step_levels([5, 10], hold_s=50.0)


def small_run(folder, model="m", loops=(5, 8), complete=True):
    """Level 5: ``loops[0]`` users in a closed loop of 5 s requests (2,048 + 100 tokens) through its 50 s hold, so
    20 output tok/s per user; level 10: ``loops[1]`` users."""
    parts = [
        closed_loop_rows(users, ramp_start, hold_end, 5.0, loops=n, completion_tokens=100)
        for (users, ramp_start, _, hold_end), n in zip(LEVELS, loops, strict=True)
    ]
    return write_run(folder, pd.concat(parts), LEVELS, meta={"model": model, "complete": complete})


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """``python -m analysis ARGS``: the exit code, stdout and stderr."""
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
