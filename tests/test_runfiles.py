"""The run folder of each run of a process: its path, its run.json, a refused folder, a complete or partial run."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import gevent

from vllm_stress.core import schema
from vllm_stress.master.runfiles import RunFiles, run_path


class ChatUser:
    pass


def environment(results_dir, overwrite: bool = False) -> SimpleNamespace:
    options = argparse.Namespace(
        results_dir=str(results_dir),
        overwrite=overwrite,
        model="",
        input_tokens=64,
        output_tokens=16,
        insecure=False,
        server_launch="",
        canaries_in_figures=False,
        connections="per-request",
    )
    quits: list[bool] = []
    runner = SimpleNamespace(quit=lambda: quits.append(True), quits=quits)
    # port 9 on the loopback refuses at once: the server has no /version
    return SimpleNamespace(parsed_options=options, host="http://127.0.0.1:9", user_classes=[ChatUser], runner=runner)


def run_json(folder) -> dict:
    return json.loads((folder / schema.RUN_FILE).read_text())


def test_run_paths_number_the_later_runs_of_a_process():
    assert run_path("results/x", 1) == "results/x" and run_path("results/x", 3) == "results/x-3"
    assert run_path("", 1).startswith("results/run-")


def test_each_run_gets_its_folder_and_run_json(tmp_path):
    files = RunFiles(environment(tmp_path / "run"), SimpleNamespace(model="m", headers={}))
    assert files.open() and files.writing
    meta = run_json(tmp_path / "run")
    assert set(meta) == set(schema.RUN_KEYS)
    assert (meta["target"], meta["model"], meta["user_class"], meta["complete"]) == (
        "http://127.0.0.1:9",
        "m",
        "ChatUser",
        False,
    )
    assert meta["server_version"] is None and meta["ended"] is None
    files.update({"server_requests": 7})
    assert run_json(tmp_path / "run")["server_requests"] == 7
    files.on_test_stop()
    files.close(1234.5, {4: {1.5: 3}}, {"workers": ["w1"]}, complete=True)
    meta = run_json(tmp_path / "run")
    assert (meta["ended"], meta["workers"], meta["complete"]) == (1234.5, ["w1"], True)
    assert (tmp_path / "run" / schema.ITL_FILE).read_text().splitlines() == ["users,itl_ms,count", "4,1.5,3"]
    assert files.folder is None and files.last_folder == str(tmp_path / "run")
    files.update({"server_requests": 9})  # between runs: nothing is written
    assert run_json(tmp_path / "run")["server_requests"] == 7
    assert files.open() and files.folder.path == str(tmp_path / "run") + "-2"


def test_a_folder_that_holds_a_run_is_refused_and_the_process_quits(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / schema.REQUESTS_FILE).write_text("")
    env = environment(tmp_path / "run")
    files = RunFiles(env, SimpleNamespace(model="m", headers={}))
    assert not files.open() and files.folder is None
    gevent.sleep(0)  # the quit runs in its own greenlet
    assert env.process_exit_code == 2 and env.runner.quits == [True]


def test_quitting_before_the_test_stops_marks_the_run_partial(tmp_path):
    files = RunFiles(environment(tmp_path / "run"), SimpleNamespace(model="m", headers={}))
    files.open()
    files.on_quitting()  # SIGTERM: Locust quits, then stops the test and quits again
    files.on_test_stop()
    files.on_quitting()
    assert files.meta["complete"] is False
    files.close(1.0, {}, {}, complete=None)
    assert run_json(tmp_path / "run")["complete"] is False
