"""The suite as a package: ``pip install .`` into an empty virtualenv gives the ``vllm-stress`` command, which runs
the smoke scenario (simulator, master, workers, analysis) from an unrelated folder — what a worker machine or a CI
job gets without the repository."""

import json
import os
import shutil
import subprocess
import sys

from tests.conftest import REPO


def test_pip_install_gives_a_working_command(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    source = tmp_path / "source"  # a copy of the tracked files: the build leaves nothing in the repository
    for name in subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    install = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", str(source)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    command = venv / "bin" / "vllm-stress"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run(
        [command, "run", "--scenario", "smoke", "--out", "smoke", "--workers", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((tmp_path / "smoke" / "report" / "summary.json").read_text())
    assert [level["users"] for level in summary["levels"]] == [2, 4] and summary["peak"] is not None
    analyse = subprocess.run(
        [command, "analyse", "smoke/run-1", "--out", "again"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert analyse.returncode == 0 and (tmp_path / "again" / "report.md").is_file(), analyse.stderr[-3000:]
    shape = subprocess.run([command, "locustfile", "shape"], capture_output=True, text=True, timeout=60, env=env)
    assert shape.stdout.strip().endswith("scenarios/shape.py") and "site-packages" in shape.stdout
