"""The live LLM dashboard of Locust's web UI: its routes, the sampled series it draws, and the run's reports."""

from __future__ import annotations

import io
import logging
import math
import time
import zipfile
from collections import deque
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
import numpy as np
from flask import Blueprint, Response, jsonify
from prometheus_client import CONTENT_TYPE_LATEST

from vllm_stress.core import bound, capacity, schema
from vllm_stress.core.metrics import percentile
from vllm_stress.core.numbers import LOG_USERS_AXIS_RATIO
from vllm_stress.master.runfolder import write_final_locust_csvs
from vllm_stress.master.runreport import Build

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.web import WebUI

    from vllm_stress.webui.liverun import LiveRun

log = logging.getLogger(__name__)

SAMPLE_S = 2.0
LATENCY_WINDOW_S = 10.0
SERIES_POINTS = 7200  # four hours at SAMPLE_S


class Series:
    """The sampled time series of a master or local runner, its levels' bounds, and its reports (see the module
    docstring)."""

    def __init__(self, live: LiveRun, environment: Environment) -> None:
        self.live = live
        self.environment = environment
        self.points: deque[dict[str, object]] = deque(maxlen=SERIES_POINTS)
        self.final: Build | None = None  # the report of the run that ended last
        self.build: Build | None = None  # the newest build, final or of a run so far
        self.greenlet = gevent.spawn(self._sample_forever)

    def _sample_forever(self) -> None:
        while True:
            gevent.sleep(SAMPLE_S)
            if self.live.recorder.run.folder is not None:
                self.points.append(self.sample())
            self.settle_bounds()

    def sample(self) -> dict[str, object]:
        recorder = self.live.recorder
        now = time.time()
        recent = [
            (ttft, tpot, ttfa) for end, ttft, tpot, ttfa in recorder.live_stats.recent if end >= now - LATENCY_WINDOW_S
        ]
        ttft, tpot, ttfa = (np.array([row[k] for row in recent if row[k] != ""], dtype=float) for k in range(3))
        server = self.live.server_metrics.latest
        return {
            "time": round(now, 1),
            "users": recorder.level,
            "measuring": recorder.measuring,
            "output_tok_s": round(recorder.live_stats.output_tokens_per_s(), 1),
            **{f"ttft_p{q}_ms": finite(percentile(ttft, q) * 1000) for q in (50, 99)},
            **{f"tpot_p{q}_ms": finite(percentile(tpot, q) * 1000) for q in (50, 99)},
            **{f"ttfa_p{q}_ms": finite(percentile(ttfa, q) * 1000) for q in (50, 99)},  # a reasoning model's
            **{key: finite(server.get(key)) for key in ("running", "waiting", "kv_cache_usage")},
        }

    def settle_bounds(self) -> None:
        """Give each held level its bound once the samples that overlap its hold are in (vllm_stress/webui/bound.py)."""
        folder = run_folder(self.live)
        pending = [level for level in self.live.progress.level_results if "bound" not in level]
        if not (pending and folder):
            return
        from vllm_stress.webui import (
            bound as live_bound,  # here: it reads the files with the analysis (pandas), which no worker needs
        )

        for level in pending:
            if (held := live_bound.hold_level(folder, level)) is not None:
                level.update(held)

    def payload(self) -> dict[str, object]:
        recorder, progress = self.live.recorder, self.live.progress
        return {
            "points": list(self.points),
            "levels": [finite_dict(level) for level in progress.level_results],
            "saturation_users": (point := saturation(progress.level_results)),
            "saturation_cause": saturation_cause(progress.level_results, point),
            "log_users_axis_ratio": LOG_USERS_AXIS_RATIO,
            "phase": progress.phase_text,
            "phase_since": progress.phase_since,
            "phase_limit_s": progress.phase_limit_s,
            "now": time.time(),
            "running": recorder.run.folder is not None,
            "totals": dict(recorder.accounting.totals),
            "folder": str(run_folder(self.live) or ""),
            "report": self.final.status() if self.final else None,
        }

    def build_report(self, folder: Path, final: bool) -> Build:
        """A build of ``folder``'s report. A build of the run so far that is still at work on it is joined rather than
        doubled; the final build waits for it to be over, then reads the whole run."""
        busy = self.build if self.build and self.build.folder == folder and self.build.state == "building" else None
        slo = getattr(self.environment.parsed_options, "slo", "")  # the ramp's --slo, set from the form too
        args = ["--slo", slo] if slo else []
        if final:
            build = self.final = Build(folder, final, after=busy, args=args)
        else:
            build = busy or Build(folder, final, args=args)
        self.build = build
        return build

    def on_test_stop(self, environment: Environment, **_kw: object) -> None:
        """A web-UI run is over (after the recorder's and the metrics' listeners): close its folder as a headless run's
        is at quit, Locust's statistics included, and build its report."""
        options = environment.parsed_options
        if options is None or options.headless:
            return
        recorder = self.live.recorder
        folder = recorder.run.folder
        if folder is None:
            return
        if (
            not options.csv_prefix
        ):  # Locust's own statistics, in the run folder as the scenario runner's --csv puts them
            write_final_locust_csvs(environment, str(Path(folder.path) / schema.LOCUST_CSV_PREFIX))
        recorder.close_run(complete=True)
        self.build_report(Path(folder.path), final=True)


def template(name: str) -> str:
    """A file of the dashboard's page, from the package's ``templates`` folder."""
    return resources.files("vllm_stress.webui").joinpath("templates", name).read_text(encoding="utf-8")


def finite(value: float | int | str | None) -> float | None:
    """A number for JSON, or None (NaN, empty, missing)."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return round(number, 4) if np.isfinite(number) else None


def finite_dict(level: dict[str, object]) -> dict[str, object]:
    return {key: finite(value) if isinstance(value, float) else value for key, value in level.items()}


def saturation(levels: list[dict[str, Any]]) -> int | None:
    """The saturation point of the steady levels held so far, by the report's rule on their live output tok/s, once a
    steady level above it shows the throughput no longer grows; None until then (one level shows no saturation, nor
    do levels whose last one is still the best)."""
    measured = {
        level["users"]: level["output_tokens_per_s"]
        for level in levels
        if level["steady"] and math.isfinite(level["output_tokens_per_s"])
    }
    point = capacity.saturation_users(measured) if measured else None
    return point if point is not None and point < max(measured) else None


def saturation_cause(levels: list[dict[str, Any]], point: int | None) -> str:
    """Why the throughput stops growing at the saturation point ``point``, as far as the held levels' server figures
    say: the report's batch-bound rule (vllm_stress.core.bound.batch_ceiling) on the steady levels; "" when it does
    not hold or nothing says yet."""
    steady = sorted((level for level in levels if level["steady"]), key=lambda level: level["users"])
    if point is None or not steady:
        return ""
    cap = next((level["max_num_seqs"] for level in steady if level.get("max_num_seqs")), None)
    batch = bound.batch_ceiling(steady, point, cap)
    return bound.batch_note(batch, cap) if batch else ""


def register(web_ui: WebUI, live: LiveRun, routes: Blueprint) -> Series:
    """Add the dashboard's routes to ``routes`` (the suite's blueprint, behind Locust's login when it has one); returns
    its Series (the tab shows its final report's state)."""
    series = Series(live, web_ui.environment)
    web_ui.environment.events.test_stop.add_listener(series.on_test_stop)

    page, script = template("dashboard.html"), template("dashboard.js")

    @routes.route("/llm/dashboard")
    @web_ui.auth_required_if_enabled
    def _dashboard() -> Response:
        return Response(page, mimetype="text/html")

    @routes.route("/llm/dashboard.js")
    @web_ui.auth_required_if_enabled
    def _dashboard_script() -> Response:
        return Response(script, mimetype="text/javascript")

    @routes.route("/llm/series.json")
    @web_ui.auth_required_if_enabled
    def _series() -> Response:
        return jsonify(series.payload())

    @routes.route("/metrics")
    @web_ui.auth_required_if_enabled
    def _metrics() -> Response:
        return Response(live.metrics.exposition(), content_type=CONTENT_TYPE_LATEST)

    @routes.route("/llm/report")
    @web_ui.auth_required_if_enabled
    def _report() -> Response:
        if (folder := run_folder(live)) is None:
            return no_run()
        final = series.final
        build = final if final and final.folder == folder else series.build_report(folder, final=False)
        build.wait()
        return built(build, "html")

    @routes.route("/llm/run-report")
    @web_ui.auth_required_if_enabled
    def _run_report() -> Response:
        return built(series.final, "html")

    @routes.route("/llm/summary.json")
    @web_ui.auth_required_if_enabled
    def _summary() -> Response:
        return built(series.final, "summary")

    @routes.route("/llm/run.zip")
    @web_ui.auth_required_if_enabled
    def _run_zip() -> Response:
        if (folder := run_folder(live)) is None:
            return no_run()
        return Response(
            zipped(folder),
            mimetype="application/zip",
            headers={"Content-Disposition": f"attachment; filename={folder.name}.zip"},
        )

    return series


def built(build: Build | None, kind: str) -> Response:
    """``build``'s report.html ("html") or summary.json ("summary"), or a one-line plain-text answer saying why not
    yet."""
    if build is None:
        return Response(
            "no run has ended yet: its report is built when it ends (see ./report for the run so far)\n",
            status=404,
            mimetype="text/plain",
        )
    if build.state == "building":
        return Response(
            f"the report of {build.folder.name} is being built: try again in a few seconds\n",
            status=503,
            mimetype="text/plain",
            headers={"Retry-After": "5"},
        )
    if build.state == "failed":
        return Response(f"no report of {build.folder.name}: {build.message}\n", status=409, mimetype="text/plain")

    name, mimetype = (schema.REPORT_HTML, "text/html") if kind == "html" else (schema.SUMMARY_JSON, "application/json")
    return Response((build.out / name).read_bytes(), mimetype=mimetype)


def no_run() -> Response:
    return Response("no run has been written yet\n", status=404, mimetype="text/plain")


def run_folder(live: LiveRun) -> Path | None:
    """The current run's folder, or the last one written (its rows stay on disk after the run)."""
    run = live.recorder.run
    path = run.folder.path if run.folder else run.last_folder
    return Path(path) if path else None


def zipped(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder.parent))
    return buffer.getvalue()
