"""The live dashboard's page and script, served from the package's templates, on a Flask app without Locust."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from flask import Blueprint, Flask

from tests.helpers import REPO
from vllm_stress.core.numbers import LOG_USERS_AXIS_RATIO
from vllm_stress.webui import dashboard

ARTIFACTS = REPO / "test-artifacts"


class Hook:
    def add_listener(self, listener) -> None:
        pass


@pytest.fixture
def client():
    run = SimpleNamespace(folder=None, last_folder=None)
    live = SimpleNamespace(recorder=SimpleNamespace(run=run), progress=SimpleNamespace(level_results=[]))
    web_ui = SimpleNamespace(
        auth_required_if_enabled=lambda view: view,
        environment=SimpleNamespace(events=SimpleNamespace(test_stop=Hook())),
    )
    app, routes = Flask(__name__), Blueprint("vllm_stress", __name__)
    series = dashboard.register(web_ui, live, routes)
    app.register_blueprint(routes)
    yield app.test_client()
    series.greenlet.kill()


def test_the_page_loads_its_script_and_has_every_element_it_draws_into(client):
    page = client.get("/llm/dashboard")
    script = client.get("/llm/dashboard.js")
    assert page.status_code == script.status_code == 200
    assert page.mimetype == "text/html" and script.mimetype == "text/javascript"
    html, js = page.get_data(as_text=True), script.get_data(as_text=True)
    assert '<script src="./dashboard.js"></script>' in html and "setInterval(refresh, 2000)" in js
    used = set(re.findall(r'getElementById\("(\w+)"\)', js)) | set(re.findall(r'draw\("(\w+)"', js))
    assert {"progress", "final", "levels", "curve", "tok", "ttft", "tpot", "server"} <= used
    assert used <= set(re.findall(r'id="(\w+)"', html))


def test_without_a_run_the_downloads_say_so(client):
    for path in ("/llm/run.zip", "/llm/report", "/llm/run-report"):
        answer = client.get(path)
        assert answer.status_code == 404 and answer.mimetype == "text/plain"


def test_the_saturation_point_of_the_steady_levels_so_far():
    levels = [
        {"users": 10, "steady": True, "output_tokens_per_s": 500.0},
        {"users": 20, "steady": True, "output_tokens_per_s": 980.0},
        {"users": 40, "steady": True, "output_tokens_per_s": 1000.0},
        {"users": 80, "steady": False, "output_tokens_per_s": 2000.0},  # not steady: not the peak
    ]
    assert dashboard.saturation(levels) == 20  # 980 is within 5 % of 1,000
    assert dashboard.saturation(levels[3:]) is None
    assert dashboard.saturation([{"users": 4, "steady": True, "output_tokens_per_s": float("nan")}]) is None
    assert dashboard.saturation(levels[:1]) is None  # one level shows no saturation
    assert dashboard.saturation(levels[:2]) is None  # nor two whose last is still the best: it may grow further


def test_the_saturation_cause_is_the_reports_batch_rule_on_the_held_levels():
    def level(users, tokens, running, waiting, cap=128):
        return {
            "users": users,
            "steady": True,
            "output_tokens_per_s": tokens,
            "server_running_mean": running,
            "server_waiting_mean": waiting,
            "server_kv_cache_usage_mean": 0.07,
            "max_num_seqs": cap,
        }

    held = [level(100, 15_000.0, 98.0, 0.0), level(200, 21_800.0, 127.0, 71.0), level(500, 21_700.0, 126.0, 374.0)]
    assert dashboard.saturation(held) == 200
    assert dashboard.saturation_cause(held, 200) == "batch-bound: max_num_seqs 128 reached"
    unknown = [{**one, "max_num_seqs": None} for one in held]
    assert dashboard.saturation_cause(unknown, 200) == "batch-bound: the batch runs flat at 127 (max_num_seqs?)"
    assert dashboard.saturation_cause([{**one, "max_num_seqs": 1024} for one in held], 200) == ""  # compute
    pending = [{key: value for key, value in one.items() if not key.startswith("server")} for one in held]
    assert dashboard.saturation_cause(pending, 200) == ""  # the bounds are not read yet
    assert dashboard.saturation_cause(held[:2], None) == ""


T0 = 1_700_000_000  # 22:13:20 UTC
HOLDS = {10: (T0 + 10, T0 + 40, False), 20: (T0 + 50, T0 + 80, True), 40: (T0 + 90, T0 + 118, True)}
TOKENS = {10: 500.0, 20: 1000.0, 40: 1020.0}


def series() -> dict:
    """A series.json of three held levels sampled every 2 s: 20 and 40 users steady, 10 users not."""
    points = []
    for time in range(T0, T0 + 120, 2):
        held = [users for users, (start, end, _) in HOLDS.items() if start <= time < end]
        users = held[0] if held else 0
        points.append(
            {
                "time": time,
                "users": users,
                "measuring": bool(held),
                "output_tok_s": TOKENS.get(users, 0.0),
                "ttft_p50_ms": 80.0,
                "ttft_p99_ms": 240.0,
                "tpot_p50_ms": 20.0,
                "tpot_p99_ms": 45.0,
                "running": users,
                "waiting": 0,
                "kv_cache_usage": users / 100,
            }
        )
    levels = [
        {"users": users, "steady": steady, "reason": "ok", "output_tokens_per_s": TOKENS[users], "bound": ""}
        for users, (_, _, steady) in HOLDS.items()
    ]
    return {
        "points": points,
        "levels": levels,
        "saturation_users": dashboard.saturation(levels),
        "log_users_axis_ratio": LOG_USERS_AXIS_RATIO,
        "phase": "",
        "phase_since": T0,
        "phase_limit_s": None,
        "now": T0 + 120,
        "running": True,
        "totals": {"requests": 100},
        "folder": "/tmp/run",
        "report": None,
    }


def opened(browser, data: dict):
    """A browser context and page showing the dashboard on the series ``data``, served by the browser itself (no
    master), in UTC."""
    files = {
        "dashboard": ("text/html", dashboard.template("dashboard.html")),
        "dashboard.js": ("text/javascript", dashboard.template("dashboard.js")),
        "series.json": ("application/json", json.dumps(data)),
    }

    def serve(route) -> None:
        content_type, body = files[route.request.url.rsplit("/", 1)[1]]
        route.fulfill(content_type=content_type, body=body)

    context = browser.new_context(timezone_id="UTC", viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.route("http://dashboard.test/llm/*", serve)
    page.goto("http://dashboard.test/llm/dashboard")
    return context, page


def test_the_charts_have_clock_ticks_units_the_holds_and_the_saturation_point(browser):
    """The page's own charts on a made-up series (served by the browser itself: no master), in UTC: every time chart
    has HH:MM:SS ticks, a unit on its y axis and a shaded hold per level (red when not steady); the curve has both
    axes labelled and ticked and the saturation point of its steady levels."""
    context, page = opened(browser, series())

    def texts(selector: str) -> list[str]:
        return page.locator(selector).all_text_contents()

    page.wait_for_selector("#curve text.saturation")
    units = {"tok": "output tok/s", "ttft": "TTFT (ms)", "tpot": "TPOT (ms)", "server": "requests"}
    for chart, unit in units.items():
        assert texts(f"#{chart} text.axis-y") == [unit]
        assert texts(f"#{chart} text.axis-x") == ["time (HH:MM:SS, this browser's clock)"]
        assert texts(f"#{chart} text.tick-x") == ["22:13:30", "22:14:00", "22:14:30", "22:15:00"]
        assert texts(f"#{chart} text.tick-y")[0] == "0" and len(texts(f"#{chart} text.tick-y")) >= 3
        assert page.locator(f"#{chart} rect.hold").count() == 3
        assert page.locator(f"#{chart} rect.hold.unsteady").count() == 1
    assert texts("#server text.axis-y2") == ["KV cache %"]
    assert texts("#server text.tick-y2") == ["0", "25", "50", "75", "100"]
    assert texts("#tok text.tick-y") == ["0", "200", "400", "600", "800", "1,000", "1,200"]
    assert texts("#curve text.axis-x") == ["concurrency (users)"] and texts("#curve text.axis-y") == ["output tok/s"]
    assert texts("#curve text.tick-x") == ["10", "20", "40"]
    assert texts("#curve text.saturation") == ["saturation: 20 users"]
    page.screenshot(path=str(ARTIFACTS / "dashboard-axes.png"), full_page=True)
    context.close()


BOUNDS = ["", "server-bound: waiting requests", "client/gateway-bound (vLLM's HTTP layer held 80 of 100)"]


def capped_levels(users: list[int]) -> list[dict]:
    """Steady levels of a server whose throughput stops growing at 128 users, with bounds of every length."""
    return [
        {
            "users": count,
            "steady": True,
            "reason": "ok",
            "output_tokens_per_s": 20_000.0 * min(count, 128) / 128,
            "bound": BOUNDS[index % len(BOUNDS)],
        }
        for index, count in enumerate(users)
    ]


@pytest.mark.parametrize(
    "users", [[4], [10, 50, 100, 200, 500, 1000], [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024]]
)
def test_the_curves_labels_are_not_written_over_each_other(browser, users):
    """The throughput-vs-users curve at 1, 6 and 12 levels: no two of its drawn labels (the saturation mark's and each
    level's) overlap; a single level has no saturation mark; the marks it cannot label are in the table."""
    levels = capped_levels(users)
    point = dashboard.saturation(levels)
    cause = "batch-bound: max_num_seqs 128 reached" if point else ""
    data = {**series(), "levels": levels, "saturation_users": point, "saturation_cause": cause}
    context, page = opened(browser, data)
    page.wait_for_selector("#curve circle.level")
    captions = page.locator("#levels caption").all_text_contents()
    assert captions == ([f"Saturation at {point} users: {cause}"] if point else [])
    boxes = page.evaluate(
        """() => [...document.querySelectorAll("#curve text.verdict, #curve text.saturation")]
            .filter(t => t.getAttribute("display") !== "none")
            .map(t => { const b = t.getBBox(); return [t.textContent, b.x, b.y, b.width, b.height]; })"""
    )
    page.screenshot(path=str(ARTIFACTS / f"dashboard-curve-{len(users)}.png"), full_page=True)
    context.close()
    for index, (name, x, y, width, height) in enumerate(boxes):
        for other, x2, y2, width2, height2 in boxes[index + 1 :]:
            apart = x + width <= x2 or x2 + width2 <= x or y + height <= y2 or y2 + height2 <= y
            assert apart, f"{name!r} is written over {other!r}"
    saturation = [name for name, *_ in boxes if name.startswith("saturation")]
    first_full = min((count for count in users if count >= 128), default=None)  # the first level at the full rate
    assert saturation == ([] if len(users) == 1 else [f"saturation: {first_full} users"])
    assert len(boxes) - len(saturation) >= min(len(users), 6)  # most levels keep their label
