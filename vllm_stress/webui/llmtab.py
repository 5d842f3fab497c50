"""The "LLM" tab of Locust's web UI: live output tok/s, latencies per level, the server's gauges, the clients' CPU."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from flask import Blueprint, Response, request

from vllm_stress.core import schema
from vllm_stress.core.metrics import bucket_percentile
from vllm_stress.master.runreport import Build
from vllm_stress.webui import dashboard, startform

if TYPE_CHECKING:
    from locust.web import WebUI

    from vllm_stress.master.livestats import LevelLatencies
    from vllm_stress.webui.liverun import LiveRun

TAB = "llm"
CSV_ROUTE = "/llm/requests.csv"
COLUMNS = {  # row key -> column title
    "level": "Level",
    "requests": "Requests",
    "failures": "Failures",
    "aborted": "Aborted at stop",
    "output_tok_s": "Output tok/s",
    "ttft_p50_ms": "TTFT p50 (ms)",
    "ttft_p99_ms": "TTFT p99 (ms)",
    "tpot_p50_ms": "TPOT p50 (ms)",
    "e2e_p50_s": "E2E p50 (s)",
    "e2e_p99_s": "E2E p99 (s)",
    "running": "Server running",
    "waiting": "Server waiting",
    "kv_cache_pct": "Server KV cache %",
    "client_cpu_pct": "Max client CPU %",
    "client_saturated": f"Client CPU > {schema.CLIENT_CPU_LIMIT_PERCENT}%",
}


def _scaled(value: float | None, factor: float, digits: int) -> float | str:
    return "" if value is None else round(value * factor, digits)


def _saturated(cpu_percent: float) -> str:
    return "yes" if cpu_percent > schema.CLIENT_CPU_LIMIT_PERCENT else "no"


def run_state(live: LiveRun, final: Build | None) -> str:
    """The first row's first cell: where the ramp is, or, once a web-UI run has ended, its report's state (``final``:
    its Build), or the current level."""
    if live.recorder.run.folder is None and final is not None:
        state = {"ready": "ready (Download Data tab, or the dashboard)", "building": "being built"}
        return f"{final.folder.name} ended: report {state.get(final.state, 'failed: ' + final.message)}"
    return live.progress.text() or f"now: {live.recorder.level} users"


def table_rows(live: LiveRun, final: Build | None = None) -> list[dict[str, object]]:
    """The tab's rows (every key of COLUMNS in each); ``final``: the report build of the run that ended last."""
    recorder, health = live.recorder, live.client_health
    server = live.server_metrics.latest
    cpu_now = max(health.latest_cpu.values(), default=0.0)
    kv_cache = server.get("kv_cache_usage", "")
    totals = recorder.accounting.totals
    rows: list[dict[str, object]] = [
        dict.fromkeys(COLUMNS, "")
        | {
            "level": run_state(live, final),
            "requests": totals["requests"],
            "failures": totals["failures"],
            "aborted": totals["aborted"],
            "output_tok_s": round(recorder.live_stats.output_tokens_per_s(), 1),
            "running": server.get("running", ""),
            "waiting": server.get("waiting", ""),
            "kv_cache_pct": "" if isinstance(kv_cache, str) else round(kv_cache * 100, 1),
            "client_cpu_pct": round(cpu_now, 1),
            "client_saturated": _saturated(cpu_now),
        }
    ]
    stats = recorder.live_stats
    by_class, canaries = stats.latencies_by_class, stats.canaries_by_level
    for users in sorted(stats.latencies_by_level.keys() | canaries.keys()):
        rows.append(level_row(f"{users} users", stats.latencies_by_level[users], health.max_cpu_by_level.get(users)))
        rows += [
            level_row(f"{users} users: {name}", by_class[at, name], None)
            for at, name in sorted(by_class)
            if at == users
        ]
        if users in canaries:  # kept apart from the level's figures (--canaries-in-figures counts them in)
            rows.append(level_row(f"{users} users: canaries", canaries[users], None))
    return rows


def level_row(label: str, level: LevelLatencies, cpu: float | None) -> dict[str, object]:
    """One row of a level (or of one traffic class at a level: no client CPU of its own)."""
    return dict.fromkeys(COLUMNS, "") | {
        "level": label,
        "requests": level.requests,
        "failures": level.failures,
        "aborted": level.aborted,
        "ttft_p50_ms": _scaled(bucket_percentile(level.ttft_ms, 0.5), 1, 1),
        "ttft_p99_ms": _scaled(bucket_percentile(level.ttft_ms, 0.99), 1, 1),
        "tpot_p50_ms": _scaled(bucket_percentile(level.tpot_ms, 0.5), 1, 2),
        "e2e_p50_s": _scaled(bucket_percentile(level.e2e_ms, 0.5), 0.001, 3),
        "e2e_p99_s": _scaled(bucket_percentile(level.e2e_ms, 0.99), 0.001, 3),
        "client_cpu_pct": "" if cpu is None else round(cpu, 1),
        "client_saturated": "" if cpu is None else _saturated(cpu),
    }


def authenticated(web_ui: WebUI) -> bool:
    """The request may use the web UI (always without --web-login)."""
    if not web_ui.web_login:
        return True
    from flask_login import current_user  # type: ignore[import-untyped]  # flask-login ships no type information

    return bool(current_user.is_authenticated)


def register(web_ui: WebUI, live: LiveRun) -> None:
    """Add the LLM tab, its data and the requests.csv download to ``web_ui``."""
    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB, "structure": [{"key": key, "title": title} for key, title in COLUMNS.items()]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "." + startform.ROUTE, "title": "Start a run with the suite's options, grouped by capability"},
        {"href": "." + CSV_ROUTE, "title": f"Download {schema.REQUESTS_FILE} (one row per request)"},
        {"href": "./llm/dashboard", "title": "Open the live LLM dashboard: charts, the ramp's progress, the report"},
        {"href": "./llm/run-report", "title": "Report of the last run that ended (built when it ends)"},
        {"href": "./llm/summary.json", "title": "Its summary.json"},
        {"href": "./llm/run.zip", "title": "Its run folder, report included (zip)"},
        {"href": "./llm/report", "title": "Report of the run so far (built now)"},
    ]
    options = web_ui.environment.parsed_options
    routes = Blueprint("vllm_stress", __name__, url_prefix=getattr(options, "web_base_path", None) or None)
    series = dashboard.register(web_ui, live, routes)
    startform.register(web_ui, routes, authenticated)
    app = web_ui.app
    assert app is not None  # WebUI makes its Flask app in __init__

    @app.after_request
    def _add_llm_table(response: Response) -> Response:
        if request.path.endswith("/stats/requests") and response.status_code == 200 and response.is_json:
            report = response.get_json()
            report["extended_stats"] = [{"key": TAB, "data": table_rows(live, series.final)}]
            response.set_data(json.dumps(report))
        return response

    @routes.route(CSV_ROUTE)
    @web_ui.auth_required_if_enabled
    def _requests_csv() -> Response:
        folder = dashboard.run_folder(live)  # the current run's, or the last one's
        if folder is None:
            return dashboard.no_run()
        with open(folder / schema.REQUESTS_FILE, "rb") as f:  # a snapshot: rows keep coming
            data = f.read()
        return Response(
            data, mimetype="text/csv", headers={"Content-Disposition": f"attachment; filename={schema.REQUESTS_FILE}"}
        )

    app.register_blueprint(routes)
