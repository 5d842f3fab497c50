"""The folders a scenario command writes (vllm_stress/scenarios/run/folders.py)."""

from __future__ import annotations

import json

import pytest

from vllm_stress.core import schema
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.folders import complete, has_rows, prepare_out


def test_an_output_folder_is_new_or_overwritten(tmp_path):
    out = tmp_path / "a" / "b"
    prepare_out(out, overwrite=False)
    assert out.is_dir()
    prepare_out(out, overwrite=False)  # an empty folder is used as it is
    (out / "old.txt").write_text("x")
    with pytest.raises(ScenarioError, match="already exists and is not empty"):
        prepare_out(out, overwrite=False)
    assert (out / "old.txt").exists()
    prepare_out(out, overwrite=True)
    assert out.is_dir() and not any(out.iterdir())


def test_a_requests_file_has_rows_only_under_its_header(tmp_path):
    path = tmp_path / schema.REQUESTS_FILE
    assert not has_rows(path)
    path.write_text("users,e2e_s\n")
    assert not has_rows(path)
    path.write_text("users,e2e_s\n4,0.5\n")
    assert has_rows(path)


@pytest.mark.parametrize(
    ("rows", "meta", "done"),
    [
        (True, {"complete": True}, True),
        (True, {"complete": False}, False),
        (True, None, False),
        (False, {"complete": True}, False),
    ],
)
def test_a_run_is_complete_with_rows_and_a_finished_run_json(tmp_path, rows, meta, done):
    (tmp_path / schema.REQUESTS_FILE).write_text("users,e2e_s\n" + ("4,0.5\n" if rows else ""))
    if meta is not None:
        (tmp_path / schema.RUN_FILE).write_text(json.dumps(meta))
    assert complete(tmp_path) is done
