"""The report of a web-UI run, built by the analysis in its own process: when the run ends, or of the run so far."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import gevent
from gevent import subprocess

log = logging.getLogger(__name__)

REPORT_FOLDER = "report"  # inside the run folder: the run folder's zip carries its report
BUILD_TIMEOUT_S = 300.0


class Build:
    """One build of a run folder's report, started once the build ``after`` is over: ``state`` is "building",
    "ready" or "failed", ``message`` says why it failed (the analysis' one-line error)."""

    def __init__(self, folder: Path, final: bool, after: Build | None = None, args: Sequence[str] = ()) -> None:
        self.folder, self.final, self.args = folder, final, list(args)  # args: more of the analysis' options
        self.state, self.message = "building", ""
        self.greenlet = gevent.spawn(self._run, after)

    @property
    def out(self) -> Path:
        return self.folder / REPORT_FOLDER

    def _run(self, after: Build | None) -> None:
        if after is not None:  # a build into the same folder is still writing it
            after.wait()
        command = [sys.executable, "-m", "vllm_stress.analysis", str(self.folder), "--out", str(self.out), *self.args]
        env = os.environ if self.final else {**os.environ, "VLLM_STRESS_DB": ""}
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            output, _ = process.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            self.state, self.message = "failed", f"the analysis took more than {BUILD_TIMEOUT_S:g} s: stopped"
        else:
            lines = output.strip().splitlines() or [f"exit code {process.returncode}"]
            self.state, self.message = ("ready", "") if process.returncode == 0 else ("failed", lines[-1])
        if self.final:
            log.info(
                "Report of %s: %s", self.folder, f"{self.out}/report.html" if self.state == "ready" else self.message
            )

    def wait(self) -> None:
        self.greenlet.join()

    def status(self) -> dict:
        return {"state": self.state, "message": self.message, "run": self.folder.name}
