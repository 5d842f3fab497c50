"""Which run folder each run of a process writes, and its ``run.json``: opened at test start, closed at the end."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import gevent

from vllm_stress.client import classes, serverinfo
from vllm_stress.client.features import stress
from vllm_stress.client.stream import clocks as receive_clocks
from vllm_stress.core import fleet, schema
from vllm_stress.core.formats import FORMAT_VERSION
from vllm_stress.master.runfolder import RunFolder, RunFolderExists, default_path

if TYPE_CHECKING:
    from locust.env import Environment

log = logging.getLogger(__name__)


class ServerUnderTest(Protocol):
    """What the master reads of the server under test, resolved when the run starts."""

    model: str
    headers: dict[str, str]


def run_meta(environment: Environment, server: ServerUnderTest) -> dict[str, Any]:
    """``run.json`` as a run starts: what it runs against and with what (every key of ``schema.RUN_KEYS``)."""
    options = environment.parsed_options
    assert options is not None and environment.host is not None  # Locust's command line set both
    return {key: None for key in schema.RUN_KEYS} | {
        schema.FORMAT_KEY: FORMAT_VERSION,
        "scenario": getattr(options, "scenario", "") or "",
        "target": environment.host,
        "model": options.model or server.model,
        "user_class": ",".join(cls.__name__ for cls in environment.user_classes),
        "input_tokens": options.input_tokens,
        "output_tokens": options.output_tokens,
        "started": time.time(),
        "complete": False,
        "workers": [],
        "lost_workers": [],
        "receive_clock": receive_clocks,  # filled as users start (workers: with their reports)
        **serverinfo.server_version(  # and server_twin
            fleet.replica_urls(environment.host)[0], server.headers, verify=not options.insecure
        ),
        "server_launch": serverinfo.server_launch(options),
        "traffic_classes": classes.run_json(options),
        "canaries_in_figures": options.canaries_in_figures,
        "stress": stress.run_json(options),
        "connections": options.connections,
        "shape": getattr(options, "shape", None),
    }


def run_path(results_dir: str, run_number: int) -> str:
    """The folder of a process's ``run_number``-th run: ``--results-dir`` (or a dated one), ``-2``, ``-3`` ... after."""
    path = results_dir or default_path()
    return path if run_number == 1 else f"{path}-{run_number}"


class RunFiles:
    """The run folder of the run under way (``folder``, None between runs), the last one written, and ``meta``;
    ``on_test_stop`` and ``on_quitting`` are listeners of Locust's events, that tell a complete run."""

    def __init__(self, environment: Environment, server: ServerUnderTest) -> None:
        self.environment = environment
        self.server = server
        self.folder: RunFolder | None = None
        self.last_folder: str | None = None  # the path of the run folder written last
        self.meta: dict[str, Any] = {}
        self.runs = 0
        self.stopped = False  # test_stop came: the run's users are stopped
        self.quitting = False

    @property
    def writing(self) -> bool:
        """A run folder is open and the run's users still run."""
        return self.folder is not None and not self.stopped

    def open(self) -> bool:
        """Open the run's folder and write its ``run.json``; a folder that cannot be used ends the process (exit
        code 2) and returns False."""
        options = self.environment.parsed_options
        assert options is not None
        self.runs += 1
        path = run_path(options.results_dir, self.runs)
        try:
            self.folder = RunFolder(path, overwrite=options.overwrite)
        except (RunFolderExists, OSError) as e:
            log.error("%s", e)
            self.environment.process_exit_code = 2
            runner = self.environment.runner
            assert runner is not None
            gevent.spawn(runner.quit)
            return False
        self.stopped = False
        self.meta = run_meta(self.environment, self.server)
        self.folder.write_run(self.meta)
        log.info("Writing the run to %s", path)
        return True

    def update(self, values: Mapping[str, Any]) -> None:
        """Set ``run.json`` keys and rewrite it (nothing between runs)."""
        if self.folder:
            self.meta.update(values)
            self.folder.write_run(self.meta)

    def save_itl(self, itl: Mapping[int, Mapping[float, int]]) -> None:
        """Rewrite the ITL histogram so far (nothing between runs)."""
        if self.folder:
            self.folder.write_itl(itl)

    def close(
        self, ended: float, itl: Mapping[int, Mapping[float, int]], values: Mapping[str, Any], complete: bool | None
    ) -> None:
        """Write the run's last ITL histogram and ``run.json`` (``values`` set, ``complete`` too unless None) and
        close its folder."""
        if not self.folder:
            return
        if complete is not None:
            self.meta["complete"] = complete
        self.save_itl(itl)
        self.update({**values, "ended": ended})
        self.folder.close()
        self.last_folder = self.folder.path
        self.folder = None

    def on_test_stop(self, **_kw: object) -> None:
        self.stopped = True

    def on_quitting(self, **_kw: object) -> None:
        # quitting before test_stop means the run was interrupted (SIGTERM, Ctrl-C): mark it partial. After a SIGTERM
        # Locust shuts down twice (its signal handler, then its main greenlet, after test_stop): the first one tells.
        if not self.quitting:
            self.quitting = True
            self.meta["complete"] = self.stopped
