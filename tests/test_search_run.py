"""The SLO search's probe loop (vllm_stress/scenarios/search/run.py) without a server: the limits it refuses, the
progress note before each probe, and a resumed probe whose runs are complete, judged without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.search.judge import Probe, parse_slos
from vllm_stress.scenarios.search.run import Probing, check_limits, probe, progress_note, write
from vllm_stress.scenarios.search.space import Space

USERS = Space("users", 1, 64, 0.1)


@pytest.mark.parametrize(
    ("repeats", "max_probes", "web_port", "message"),
    [
        (0, 12, 0, "--repeats and --max-probes must be at least 1, got 0 and 12"),
        (1, 0, 0, "got 1 and 0"),
        (1, 1, 70000, "--web-port must be a TCP port"),
    ],
)
def test_limits_no_search_can_use(repeats, max_probes, web_port, message):
    with pytest.raises(ScenarioError, match=message):
        check_limits(repeats, max_probes, web_port)
    check_limits(1, 1, 65535)


def test_the_progress_note_says_the_probe_and_the_verdict_so_far():
    assert (
        progress_note({}, USERS, 2, 1, 12, 1, 1)
        == "SLO search probe 1 of at most 12: 2 users, run 1 of 1; no verdict yet"
    )
    probes = {32: Probe(32, 32, True, True, ""), 64: Probe(64, 64, False, True, "misses e2e_p50 ≤ 300 ms")}
    assert progress_note(probes, USERS, 48, 3, 12, 2, 3) == (
        "SLO search probe 3 of at most 12: 48 users, run 2 of 3; "
        "so far 32 users passes, 64 users fails (misses e2e_p50 ≤ 300 ms)"
    )


def complete_run(folder: Path, users: int) -> None:
    (level,) = step_levels([users], hold_s=50.0)
    write_run(
        folder,
        closed_loop_rows(users, level[1], level[3], 5.0, completion_tokens=100),
        [level],
        meta={"complete": True},
    )


def test_only_the_runs_not_complete_are_run(tmp_path, monkeypatch):
    """A resumed probe: run 1 is complete and judged as it is; run 2 (empty) is run, here by a stand-in that writes
    a complete run where Locust would."""
    complete_run(tmp_path / "probe-5" / "run-1", 5)
    started = []

    def run(self, space, load, run_dir, label):
        started.append((load, run_dir.name, label))
        complete_run(run_dir, space.users_for(load))

    monkeypatch.setattr(Probing, "run", run)
    probing = Probing("smoke", tmp_path / "smoke.conf", {}, "http://127.0.0.1:1", tmp_path, 1, [], [], 0, 2, 12)
    slos = parse_slos("e2e_p50=6s")
    judged = probe(probing, {}, USERS, 5, slos)
    assert started == [(5, "run-2", "SLO search probe 1 of at most 12: 5 users, run 2 of 2; no verdict yet")]
    assert judged.passed and judged.runs == 2 and judged.users == 5
    held = write(tmp_path, "smoke", slos, {5: judged}, USERS, repeats=2)
    assert held["answer"] == 5 and (tmp_path / "search.json").is_file()
    assert "**5 users**" in (tmp_path / "search.md").read_text()
