"""The folders a scenario command writes: a fresh output folder, and whether a run folder holds a complete run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from vllm_stress.core import schema
from vllm_stress.scenarios.run.errors import ScenarioError


def prepare_out(out: Path, overwrite: bool) -> None:
    """Make ``out`` an empty folder; one that holds anything is replaced only with ``overwrite``."""
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ScenarioError(f"{out} already exists and is not empty; choose another --out or pass --overwrite")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def has_rows(path: Path) -> bool:
    """``requests.csv`` exists and holds at least one row under its header."""
    if not path.is_file():
        return False
    with path.open() as f:
        return bool(f.readline() and f.readline())


def complete(run_dir: Path) -> bool:
    """The run folder holds measured requests and a run.json that says the run ended normally."""
    meta = run_dir / schema.RUN_FILE
    return (
        has_rows(run_dir / schema.REQUESTS_FILE)
        and meta.is_file()
        and bool(json.loads(meta.read_text()).get("complete"))
    )
