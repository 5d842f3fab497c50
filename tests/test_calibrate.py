"""The twin: `python -m simulator calibrate` fits the engine's step-time constants to measured levels, refuses runs it
cannot fit, and a simulator started from the profile it writes says it is a twin (docs/concepts/twin.md)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.helpers import run_json, small_run
from vllm_stress.analysis.compare.compare import TWIN_PREFIX, Comparison, Side
from vllm_stress.analysis.report.document import twin_blocks
from vllm_stress.client.serverinfo import server_version
from vllm_stress.core.schema import REQUESTS_FILE
from vllm_stress.scenarios.studies import calibrate
from vllm_stress.simulator.engine.steptime import StepTimeModel
from vllm_stress.simulator.model.profiles import load_profile

TRUTH = {"t_fixed": 0.003, "mfu": 0.2, "bw_eff": 0.4, "t_frontend": 0.002}  # a server the base profile is not


def decode_step(profile, batch: int, context: int) -> float:
    """The ideal duration of a step of ``batch`` decodes at ``context`` tokens each."""
    return StepTimeModel(profile).ideal(batch, batch * (context + 0.5), batch * (context + 1))


def virtual_levels(profile, users, engine, prompt: int = 128) -> list[calibrate.Level]:
    """Levels 'measured' on the engine model itself (no noise)."""
    levels = []
    for n in users:
        level = calibrate.Level("virtual", n, engine, prompt, 64, {})
        levels.append(calibrate.Level("virtual", n, engine, prompt, 64, calibrate.predict(profile, level)))
    return levels


def test_the_fit_recovers_a_known_step_time_and_predicts_unseen_settings():
    truth = load_profile("cpu-tiny", TRUTH)
    twin = calibrate.fit(load_profile("cpu-tiny"), virtual_levels(truth, (1, 2, 4, 8), {"max_num_seqs": 4}))
    assert twin.mfu == pytest.approx(truth.mfu, rel=0.1)  # prefill: compute-bound, identifiable
    # the API server's time: one request at a time, so waits grow with the users, unlike a step's cost
    assert twin.t_frontend == pytest.approx(truth.t_frontend, rel=0.1)
    # decode: t_fixed + weights / bandwidth, identifiable as a sum only (t_fixed against bw_eff)
    assert decode_step(twin, 4, 160) == pytest.approx(decode_step(truth, 4, 160), rel=0.03)
    unseen = virtual_levels(truth, (8, 16), {"max_num_seqs": 16}, prompt=256)
    for errors in calibrate.relative_errors(twin, unseen):
        assert max(abs(error) for error in errors.values()) < 0.1, errors


def test_runs_it_cannot_fit_are_refused_in_one_line(tmp_path):
    folder = small_run(tmp_path / "no-metrics")
    with pytest.raises(calibrate.CalibrationError, match="no server metrics"):
        calibrate.measured_levels(str(folder))
    rows = pd.read_csv(folder / REQUESTS_FILE)
    rows["completion_tokens"] = None
    rows.to_csv(folder / REQUESTS_FILE, index=False)
    with pytest.raises(calibrate.CalibrationError, match="no token counts"):
        calibrate.measured_levels(str(folder))
    assert calibrate.main(["--from-run", str(folder), "--out", str(tmp_path / "t.toml")]) == 2
    assert not (tmp_path / "t.toml").exists()


def test_the_engine_flags_of_a_launch_and_the_cache_it_reported():
    meta = {
        "server_launch": {"kind": "server-cmd", "command": ["vllm", "serve", "m", "--max-num-seqs", "4", "--seed=1"]},
        "server_cache_config": {"block_size": 128, "num_gpu_blocks": 8192},
    }
    assert calibrate.launch_settings(meta) == {"max_num_seqs": 4, "block_size": 128, "num_gpu_blocks_override": 8192}
    assert calibrate.launch_settings({}) == {}


def test_a_twin_report_says_so_first():
    twin = {"source": "results/sweep/run-1", "error": "median |error| on its runs: tpot_p50_s 2.0%"}
    (block,) = twin_blocks({"cfg": {"twin": twin}, "real": {"twin": None}})  # type: ignore[dict-item]
    assert block.text.startswith("**Twin — predicted, not measured:** cfg was served by a twin calibrated on ")
    assert twin_blocks({"real": {"twin": None}}) == []  # type: ignore[dict-item]


def test_calibrate_on_a_simulator_sweep_then_serve_the_twin(tmp_path, capsys, scenarios, simulator):
    """A smoke sweep (levels 2 and 4) of a simulator with known constants; the twin fitted to it reproduces the
    sweep's medians, its decode step lies between the truth's and the measured one, it writes a profile the simulator
    serves, and a run against that simulator records it as a twin."""
    truth_args = [f"--simulator-arg=--set={key}={value}" for key, value in TRUTH.items()]
    assert (
        scenarios(["run", "--scenario", "smoke", "--out", str(tmp_path / "sweep"), "--workers", "1", *truth_args]) == 0
    )
    sweep = str(tmp_path / "sweep" / "run-1")
    profile_path = tmp_path / "twin.toml"
    assert calibrate.main(["--from-run", sweep, "--out", str(profile_path)]) == 0
    printed = capsys.readouterr().out
    assert f"{profile_path}: median |error| on its runs: output_tokens_per_s" in printed
    twin = load_profile(str(profile_path))
    assert twin.twin_source == sweep and twin.num_gpu_blocks_override > 0  # the sweep's KV blocks
    # The twin reproduces what it was fitted to: the sweep's own medians.
    levels = calibrate.measured_levels(sweep)
    assert calibrate.error_summary(calibrate.relative_errors(twin, levels))["tpot_p50_s"] < 0.15
    # A busy CPU only slows the simulated steps down, never speeds them up: the twin's decode step is at least the
    # truth's and at most the sweep's measured time per output token (a decode step plus the prefills between).
    truth = load_profile("cpu-tiny", TRUTH)
    measured_tpot = max(level.measured["tpot_p50_s"] for level in levels)
    assert decode_step(truth, 4, 140) * 0.9 <= decode_step(twin, 4, 140) <= measured_tpot * 1.1
    sim = simulator("--profile", str(profile_path))
    assert server_version(sim.url, {}, verify=True)["server_twin"] == {"source": sweep, "error": twin.twin_error}
    assert run_json(tmp_path / "sweep" / "run-1")["server_twin"] is None  # the measured server was no twin


def test_compare_marks_a_twin_side():
    def comparison(baseline: list[str], candidate: list[str]) -> Comparison:
        sides = [Side(["x"], pd.DataFrame(), servers) for servers in (baseline, candidate)]
        return Comparison(sides[0], sides[1], [], [], {})

    real, twin = ["version 0.32.0, launched by hand"], [f"{TWIN_PREFIX}results/sweep/run-1 (…), version 0.33.0"]
    assert comparison(real, twin).twin_line() == "real vs twin"
    assert comparison(twin, twin).twin_line() == "twin vs twin"
    assert comparison(real, []).twin_line() == ""
