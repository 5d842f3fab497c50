"""The suite as a package: a regular ``pip install`` of the tracked files into an empty virtualenv (the
``installed_suite`` fixture) gives the ``vllm-stress`` command, the locustfiles and the simulator, and they work from
a folder of the user's own that holds packages named like the repository's entry folders (``scenarios``,
``analysis``, ``locustfiles``): nothing the installed suite runs may resolve to those."""

import json
from pathlib import Path

import pytest

from benchmarks.harness import read_rows
from tests.helpers import server_completed, wait_until
from vllm_stress.simulator.process import READY_LINE

pytestmark = pytest.mark.timeout(900)  # the first test also waits for the install (300 s at most)

DECOYS = ("scenarios", "analysis", "locustfiles")
LEVELS = ["2", "4"]


def decoy_output(name: str) -> str:
    return f"the project's own {name}"


@pytest.fixture(scope="module")
def project(installed_suite, tmp_path_factory) -> Path:
    """A folder with its own ``scenarios``, ``analysis`` and ``locustfiles`` packages, each of which says so if it is
    run or imported (``locustfiles/chat.py`` too)."""
    folder = tmp_path_factory.mktemp("project")
    for name in DECOYS:
        package = folder / name
        package.mkdir()
        (package / "__init__.py").write_text(f"print({decoy_output(name)!r})\n")
        (package / "__main__.py").write_text(f"print({decoy_output(name)!r})\n")
    (folder / "locustfiles" / "chat.py").write_text(f"raise SystemExit({decoy_output('locustfiles')!r})\n")
    return folder


def assert_no_decoy(*outputs: str) -> None:
    assert not [name for name in DECOYS for text in outputs if decoy_output(name) in text]


def test_the_smoke_scenario_runs_and_its_folder_is_analysed_again(installed_suite, project):
    # holds of 3 s, not the scenario's 4: some 60 and 120 requests end in them, and one steady level makes the peak
    hold = "--locust-arg=--step-time=3"
    run = installed_suite.run(
        "vllm-stress", "run", "--scenario", "smoke", "--out", "smoke", "--workers", "1", hold, cwd=project, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert_no_decoy(run.stdout, run.stderr)
    summary = json.loads((project / "smoke" / "report" / "summary.json").read_text())
    assert [level["users"] for level in summary["levels"]] == [2, 4] and summary["peak"] is not None
    assert all(level["requests"] > 0 and level["failures"] == 0 for level in summary["levels"]), summary["levels"]
    rows = read_rows(project / "smoke" / "run-1" / "requests.csv")
    assert {row["users"] for row in rows} == set(LEVELS)
    again = installed_suite.run("vllm-stress", "analyse", "smoke/run-1", "--out", "again", cwd=project, timeout=120)
    assert again.returncode == 0 and (project / "again" / "report.md").is_file(), again.stderr[-3000:]
    assert_no_decoy(again.stdout, again.stderr)
    # the same folder, analysed again by the command: the same numbers (the run's report has the run's one level set)
    assert json.loads((project / "again" / "summary.json").read_text())["levels"] == summary["levels"]


def test_locust_runs_the_installed_locustfiles_against_the_installed_simulator(
    installed_suite, project, processes, tmp_path
):
    paths = {}
    for name in ("chat", "shape"):
        found = installed_suite.run("vllm-stress", "locustfile", name, cwd=project, timeout=60)
        assert found.returncode == 0, found.stderr
        paths[name] = Path(found.stdout.strip())
        assert paths[name].is_file() and "site-packages" in paths[name].parts, paths[name]
    assert paths["shape"].as_posix().endswith("vllm_stress/scenarios/shapes/shape.py")

    simulator = processes(
        [installed_suite.bin / "python", "-m", "vllm_stress.simulator", "--port", "0", "--profile", "cpu-tiny"],
        tmp_path / "simulator.log",
        env=installed_suite.env,
        cwd=project,
    )
    ready = wait_until(lambda: READY_LINE.search((tmp_path / "simulator.log").read_text()), timeout=60)
    assert ready, (tmp_path / "simulator.log").read_text()[-3000:]
    assert simulator.poll() is None
    out = tmp_path / "run"
    locust = installed_suite.run(
        "python",
        "-m",
        "locust",
        "-f",
        f"{paths['chat']},{paths['shape']}",
        "--headless",
        "--only-summary",
        "-H",
        ready["url"],
        "--levels",
        ",".join(LEVELS),
        "--step-time",
        "3",
        "--warmup",
        "0",
        "--ramp-time",
        "1",
        "--input-tokens",
        "16",
        "--output-tokens",
        "8",
        "--results-dir",
        str(out),
        cwd=project,
        timeout=180,
    )
    assert locust.returncode == 0, locust.stderr[-3000:]
    assert_no_decoy(locust.stdout, locust.stderr)

    rows, levels = read_rows(out / "requests.csv"), read_rows(out / "levels.csv")
    assert [level["users"] for level in levels] == LEVELS
    for level in levels:  # each level's hold has requests of that level that ended in it, all of them answered
        held = [
            row
            for row in rows
            if row["users"] == level["users"]
            and float(level["hold_start"]) <= float(row["end_time"]) <= float(level["hold_end"])
        ]
        assert held and all(row["ok"] == "1" for row in held), (level, len(held))
    # every request the simulator finished is a row; a request the stop cut is an Aborted row the server may or may
    # not have finished
    finished = [row for row in rows if row["error"] != "Aborted"]
    assert wait_until(lambda: len(finished) <= server_completed(ready["url"]) <= len(rows), timeout=10), (
        len(finished),
        server_completed(ready["url"]),
        len(rows),
    )
