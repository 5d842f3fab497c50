"""benchmarks/twin_table.py --waves: how a closed loop's requests bunch, on synthetic runs with known starts."""

from benchmarks.twin_table import waves
from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run


def wave_run(tmp_path, spread: float):
    """One 8-user level of 1 s requests (TTFT 0.1 s), its users started over ``spread`` of a lifetime."""
    levels = step_levels([8], hold_s=30)
    ((users, _, hold, end),) = levels
    rows = closed_loop_rows(users, hold - 5, end, 1.0, spread=spread, completion_tokens=64)
    return str(write_run(tmp_path / f"spread-{spread}", rows, levels, meta={"complete": True}))


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_users_started_together_are_one_wave_and_spread_users_none(tmp_path):
    (together,) = waves(wave_run(tmp_path, spread=0.0))
    (spread,) = waves(wave_run(tmp_path, spread=1.0))  # 125 ms apart
    assert cells(together)[1:4] == ["8", "240", "7.00"]  # each of 8 users x 30 loops with the 7 others
    assert cells(spread)[1:4] == ["8", "240", "0.00"]
    assert cells(together)[4] == "100.0 / 100.0 / 100.0"  # TTFT p10 / p50 / p90, ms
