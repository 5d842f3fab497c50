"""The LLM tab of the web UI on a running master with one worker, over HTTP and in a headless Chromium."""

from __future__ import annotations

import csv
import io
import json
import re
import secrets
import subprocess
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import requests

from benchmarks.harness import read_rows
from tests.helpers import LOCUST, REPO
from vllm_stress.core import schema
from vllm_stress.core.metrics import bucket_percentile
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.webui.llmtab import COLUMNS, CSV_ROUTE, TAB

ARTIFACTS = REPO / "test-artifacts"
LOCUST_OPTIONS = ["--input-tokens", "64", "--output-tokens", "16", "-L", "INFO"]
RAMP = [
    "-f",
    "locustfiles/chat.py,scenarios/shape.py",
    "--levels",
    "2,4",
    "--step-time",
    "4",
    "--warmup",
    "0",
    "--ramp-time",
    "1",
]
DEADLINE_S = 20.0


class Master:
    """``locust --master`` with its web UI and one worker, as processes on 127.0.0.1."""

    def __init__(self, folder: Path, processes, *args: str, password: str = "") -> None:
        self.folder = folder
        self.start_process = processes
        self.args = args
        self.session = requests.Session()  # logged in as admin when the web UI has a ``password``
        self.password = password
        self.results = folder / "run"
        master_port, web_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{web_port}"
        self.processes: dict[str, subprocess.Popen] = {}
        self.start(
            "master",
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web_port),
            "--results-dir",
            str(self.results),
        )
        self.start("worker", "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port))

    def start(self, name: str, *args: str) -> None:
        command = [*LOCUST, *LOCUST_OPTIONS, *self.args, *args]
        self.processes[name] = self.start_process(command, self.folder / f"{name}.log")

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n" + (self.folder / f"{name}.log").read_text()[-3000:] for name in self.processes)

    def stats(self) -> dict:
        return self.session.get(self.url + "/stats/requests", timeout=5).json()

    def log_in(self) -> None:
        self.session.post(self.url + "/login_submit", data={"username": "admin", "password": self.password}, timeout=5)

    def wait_for_worker(self) -> None:
        until(lambda: self._worker_count() == 1, "the worker connected", self)

    def _worker_count(self) -> int:
        try:
            if self.password:
                self.log_in()
            return self.stats().get("worker_count", 0)
        except requests.ConnectionError:
            return 0

    def stop(self) -> None:
        for proc in self.processes.values():
            proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def until(condition, what: str, master: Master, deadline_s: float = DEADLINE_S):
    """Poll ``condition`` every 0.5 s until it returns something true; fail with the logs after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if result := condition():
            return result
        time.sleep(0.5)
    pytest.fail(f"not within {deadline_s:g} s: {what}\n{master.logs()}")


@pytest.fixture
def master(tmp_path, processes):
    """Start the master and its worker with the given locust arguments; both are stopped after the test."""
    started = []

    def start(*args: str, password: str = "") -> Master:
        started.append(Master(tmp_path, processes, *args, password=password))
        started[-1].wait_for_worker()
        return started[-1]

    yield start
    for running in started:
        running.stop()


def llm_table(stats: dict) -> list[dict]:
    return next(table["data"] for table in stats.get("extended_stats", []) if table["key"] == TAB)


def both_counted(stats: dict) -> dict | None:
    """The stats once the LLM table has measurements and Locust's own statistics count chat requests, else None."""
    locust_counted = any(entry["name"] == "chat" and entry["num_requests"] > 0 for entry in stats["stats"])
    return stats if locust_counted and measured(stats) else None


def counted_past(stats: dict, requests: int) -> dict | None:
    """The stats once both tables count and the LLM table's level has at least ``requests``, else None."""
    return stats if both_counted(stats) and llm_table(stats)[1]["requests"] >= requests else None


def measured(stats: dict) -> list[dict] | None:
    """The LLM table once it shows output tok/s and a level's TTFT, else None."""
    table = llm_table(stats)
    now, levels = table[0], table[1:]
    if now["output_tok_s"] and levels and levels[0]["ttft_p50_ms"] != "":
        return table
    return None


def test_llm_table_in_stats_of_a_distributed_run(master, simulator):
    master = master("-f", "locustfiles/chat.py")
    sim = simulator("--profile", "cpu-tiny")
    swarm = requests.post(master.url + "/swarm", data={"user_count": 4, "spawn_rate": 4, "host": sim.url}, timeout=10)
    assert swarm.json()["success"], swarm.text
    # Locust caches its own /stats/requests for 2 s while the LLM table is fresh each time: wait for both
    stats = until(
        lambda: both_counted(master.stats()), "tok/s and TTFT in the LLM table, requests in Locust's stats", master
    )
    table = llm_table(stats)
    now, level = table[0], table[1]
    assert now["level"] == "now: 4 users" and now["output_tok_s"] > 0 and now["running"] != ""
    assert level["level"] == "4 users" and level["failures"] == 0 and level["requests"] > 0
    assert 0 < level["ttft_p50_ms"] <= level["ttft_p99_ms"] < level["e2e_p99_s"] * 1000
    assert set(now) == set(level) == set(COLUMNS)
    assert {"stats", "errors", "current_rps", "workers", "user_count", "state"} <= set(stats)  # Locust's own

    download = requests.get(master.url + CSV_ROUTE, timeout=10)
    assert download.status_code == 200 and download.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(download.text)))
    assert list(rows[0]) == schema.REQUEST_COLUMNS
    worker = stats["workers"][0]["id"]
    assert len(rows) >= level["requests"] and {r["worker"] for r in rows} == {worker}

    # twice the requests measured, then the same moment in all three views
    final = until(lambda: counted_past(master.stats(), 2 * level["requests"]), "twice the requests", master)
    assert requests.post(master.url + "/stop", timeout=10).json()["success"]
    health = master.results / schema.CLIENT_HEALTH_FILE
    until(lambda: {"master", worker} <= {r["worker"] for r in read_rows(health)}, "CPU rows at the stop", master)
    assert_ttft_p50_agrees(final, master.results, master.folder / "report")


def assert_ttft_p50_agrees(stats: dict, run, out) -> None:
    """The LLM tab (0.1 ms buckets) and the report (linear interpolation over the requests of the derived window)
    give the same TTFT p50 within their rounding and the few requests their windows differ by (docs in
    vllm_stress/core/metrics.py). Locust's own table counts from the run's start, warm-up included, in whole
    milliseconds below 100 ms: it agrees with the first TTFTs of requests.csv, as many as it counted."""
    from vllm_stress.analysis.cli import main as analyse

    live_ms = llm_table(stats)[1]["ttft_p50_ms"]
    assert analyse([str(run), "--out", str(out)]) == 0
    report_ms = json.loads((out / "summary.json").read_text())["levels"][0]["ttft_p50_s"] * 1000
    assert abs(live_ms - report_ms) <= 1.0 + 0.15 * report_ms, (live_ms, report_ms)
    entry = next(e for e in stats["stats"] if (e["method"], e["name"]) == ("TTFT", "chat"))
    rows = pd.read_csv(run / schema.REQUESTS_FILE)
    first_ttft_at = (rows["start_time"] + rows["ttft_s"]).sort_values().index[: entry["num_requests"]]
    counted_ms = rows.loc[first_ttft_at, "ttft_s"].median() * 1000
    assert abs(entry["median_response_time"] - counted_ms) <= 1.0 + 0.15 * counted_ms, (entry, counted_ms)


def test_browser_drives_a_ramp_from_the_form(master, simulator, browser):
    """A 3-level ramp with two traffic classes and an SLO typed into the suite's start form (a bad value first: the
    form says why, nothing starts): the LLM tab and the dashboard follow it — charts with points, a curve point per
    level with its verdict, a progress line that moves — and when it ends the report is built by itself, linked from
    both, with the level bounds the live curve showed, both classes and the SLO's goodput; Locust's own tabs still
    work."""
    from playwright import sync_api

    master = master("-f", "locustfiles/chat.py,scenarios/shape.py")  # the ramp comes from the form
    sim = simulator("--profile", "cpu-tiny")
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1100, "height": 1000})
    page.goto(master.url + "/llm/start")
    page.screenshot(path=str(ARTIFACTS / "webui-start-form.png"), full_page=True)
    page.get_by_text("Correctness canaries", exact=True).click()  # a group opens
    page.screenshot(path=str(ARTIFACTS / "webui-start-form-group.png"), full_page=True)
    page.get_by_text("Load profile", exact=True).click()  # the ramp's warm-up and ramp time are in this group
    page.locator("[name=host]").fill(sim.url)  # the shape sets the users: no user count asked
    for name, value in FORM.items():
        page.locator(f"[name='{name}']").fill(value)
    page.locator("[name='--levels']").fill("2,x")
    page.get_by_role("button", name="Start").click()
    sync_api.expect(page.get_by_text("--levels must be comma-separated whole numbers, got '2,x'")).to_be_visible()
    page.locator("[name='--levels']").fill(FORM["--levels"])
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(master.url + "/")  # Locust's page, the run going on
    # Locust's tabs follow ?tab= (a click races the tabs' re-render while the page polls)
    page.goto(f"{master.url}/?tab={TAB}")
    rows = page.get_by_role("row")
    until(lambda: shows_a_level(page, rows, master), "a level's measurements on the LLM tab", master, RAMP_DEADLINE_S)
    page.screenshot(path=str(ARTIFACTS / "webui-llm-tab-during.png"), full_page=True)
    dashboard = browser.new_page(viewport={"width": 1400, "height": 1100})
    watch_dashboard(dashboard, master, sync_api)
    page.goto(f"{master.url}/?tab={TAB}")  # Locust's page stops polling when a run stops: a new load shows the end
    sync_api.expect(page.get_by_role("tab", name="LLM")).to_have_attribute("aria-selected", "true")
    until(
        lambda: "ended: report ready" in "".join(cells(rows.nth(1))[:1]),
        "the tab saying the report is ready",
        master,
    )
    firsts = [cells(rows.nth(i))[0] for i in range(2, rows.count())]
    assert [first for first in firsts if first.endswith("users")] == ["2 users", "4 users", "6 users"]
    assert {"2 users: chat", "2 users: batch", "2 users: canaries"} <= set(firsts)  # a row per class, canaries apart
    page.screenshot(path=str(ARTIFACTS / "webui-llm-tab-after.png"), full_page=True)
    page.get_by_role("tab", name="Statistics").click()
    sync_api.expect(rows.filter(has_text="TTFT").first).to_be_visible()
    page.get_by_role("tab", name="Download Data").click()
    link = page.get_by_role("link", name="Report of the last run that ended").get_attribute("href")
    report = browser.new_page()
    report.goto(f"{master.url}/{link.removeprefix('./')}")
    check_report(report, master, sync_api)


FORM = {
    "--levels": "2,4,6",
    "--step-time": "4",
    "--warmup": "0",
    "--ramp-time": "1",
    "--input-tokens": "64",
    "--output-tokens": "16",
    "--scenario": "form-ramp",
    "--slo": "ttft=2s,tpot=500ms",
    "--traffic-class": "chat:weight=1,slo=ttft=2s\nbatch:weight=1,output=32",
}  # the start form's fields, named by their flags
LEVEL_LINE = re.compile(r"Level (\d)/3 \(\d users\): ")  # the progress line of a level going on
LEVEL_ROW = re.compile(r"\d users")  # a level's row of the LLM tab: "2 users", or the progress line of one going on
ENDED_LEVEL = re.compile(r"^\d+ users$")  # the first cell of a level's own row
RAMP_DEADLINE_S = 150.0  # three levels of a few seconds each on a loaded machine, then the report


def watch_dashboard(page, master: Master, sync_api) -> None:
    """The live dashboard draws the series, its progress line moves from level to level, the curve gets a point per
    level with its verdict, and when the run ends it links the report built by itself."""
    page.goto(master.url + "/llm/dashboard")
    until(
        lambda: (
            page.locator("#tok polyline").count()
            and len(page.locator("#tok polyline").get_attribute("points").split()) >= 3
        ),
        "tok/s points on the dashboard",
        master,
    )
    progress = page.locator("#progress")
    shown = until(
        lambda: level_or_end(progress.inner_text()),
        "a level or the run's end on the progress line",
        master,
        RAMP_DEADLINE_S,
    )
    if level := LEVEL_LINE.search(shown):  # a loaded machine may open the dashboard once the run has ended
        until(
            lambda: moved_on(progress.inner_text(), level[1]),
            "the progress line past that level",
            master,
            RAMP_DEADLINE_S,
        )
    page.screenshot(path=str(ARTIFACTS / "webui-llm-dashboard-during.png"), full_page=True)
    until(lambda: page.locator("#run-report").count(), "the report's link on the dashboard", master, RAMP_DEADLINE_S)
    until(lambda: "pending" not in page.locator("#levels").inner_text(), "every level's bound", master)
    assert page.locator("#curve circle").count() == 3
    verdicts = page.locator("#curve text.verdict").all_text_contents()
    assert [text.split(":")[0] for text in verdicts] == ["2", "4", "6"], verdicts
    sync_api.expect(page.locator("#progress")).to_contain_text("run ended")
    page.screenshot(path=str(ARTIFACTS / "webui-llm-dashboard.png"), full_page=True)
    summary = requests.get(master.url + "/llm/summary.json", timeout=10).json()
    assert summary["scenario"] == "form-ramp" and summary["input_tokens"] == 64  # the form's options, in run.json
    assert summary["slo"] == {"ttft": 2.0, "tpot": 0.5}  # the form's --slo, read by the report
    assert {level["class"] for level in summary["classes"]["levels"]} == {"chat", "batch"}
    # the same rule on the same files: the same verdict; the figures it quotes lean on the e2e p50, the live
    # window's (the rows in by the hold's end) against the report's (docs/concepts/bounds.md), which a loaded
    # machine can set a few milliseconds apart
    report_bounds = {level["users"]: verdict_kind(level["bound"]) for level in summary["levels"]}
    live = requests.get(master.url + "/llm/series.json", timeout=10).json()["levels"]
    assert {level["users"]: verdict_kind(level["bound"]) for level in live} == report_bounds
    with page.expect_popup() as popup:
        page.locator("#run-report").click()
    check_report(popup.value, master, sync_api, "webui-llm-report.png")


def check_report(report, master: Master, sync_api, screenshot: str = "") -> None:
    report.wait_for_load_state()
    sync_api.expect(report.locator("h1")).to_contain_text("vLLM stress test report")
    sync_api.expect(report.locator("body")).to_contain_text("6")
    sync_api.expect(report.locator("body")).to_contain_text("Traffic classes")
    sync_api.expect(report.locator("body")).to_contain_text("Goodput: share of requests that succeeded with ttft")
    if screenshot:
        report.screenshot(path=str(ARTIFACTS / screenshot), full_page=True)


def test_web_login_guards_the_report_and_the_run(master, simulator, monkeypatch):
    """With --web-login every route of the suite asks for the login; logged in, a ramp started over HTTP ends with
    its report built by itself, its summary.json, and the run folder with the report in one zip; a bad form value is
    refused with its one-line error."""
    monkeypatch.setenv("LOCUST_TEST_PASSWORD", password := secrets.token_hex(8))
    master = master("-f", RAMP[1] + ",tests/fixtures/web_login.py", *RAMP[2:], "--web-login", password=password)
    sim = simulator("--profile", "cpu-tiny")
    anonymous = requests.Session()
    for route in ROUTES:
        answer = anonymous.get(master.url + route, allow_redirects=False, timeout=10)
        assert answer.status_code == 302 and "/login" in answer.headers["Location"], route
    assert (
        anonymous.post(master.url + "/swarm", data={"host": sim.url}, allow_redirects=False, timeout=10).status_code
        == 302
    )
    user = master.session
    assert user.get(master.url + "/llm/run-report", timeout=10).status_code == 404  # no run has ended yet
    assert "# TYPE vllm_stress_" in user.get(master.url + "/metrics", timeout=10).text
    refused = user.post(master.url + "/swarm", data={"host": sim.url, "--warmup": "soon"}, timeout=10).json()
    assert not refused["success"] and refused["message"] == "argument --warmup: invalid float value: 'soon'"
    assert user.post(master.url + "/swarm", data={"host": sim.url}, timeout=10).json()["success"]
    until(
        lambda: user.get(master.url + "/llm/series.json", timeout=10).json()["levels"],
        "the first level held",
        master,
        RAMP_DEADLINE_S,
    )
    so_far = user.get(master.url + "/llm/report", timeout=60)  # built now, the run going on meanwhile
    assert so_far.status_code == 200 and "vLLM stress test report" in so_far.text
    until(
        lambda: (
            (series := user.get(master.url + "/llm/series.json", timeout=10).json())["report"]
            and series["report"]["state"] == "ready"
        ),
        "the report built when the ramp ended",
        master,
        RAMP_DEADLINE_S,
    )
    report = user.get(master.url + "/llm/run-report", timeout=10)
    assert report.status_code == 200 and "vLLM stress test report" in report.text
    summary = user.get(master.url + "/llm/summary.json", timeout=10).json()
    assert [level["users"] for level in summary["levels"]] == [2, 4]
    run = json.loads((master.results / schema.RUN_FILE).read_text())
    assert run["complete"] is True and run["ended"] > run["started"]  # closed at the run's end, not at quit
    archive = zipfile.ZipFile(io.BytesIO(user.get(master.url + "/llm/run.zip", timeout=10).content))
    assert {
        "run/requests.csv",
        "run/levels.csv",
        "run/locust_stats.csv",
        "run/report/report.html",
        "run/report/summary.json",
    } <= set(archive.namelist())


ROUTES = [
    "/llm/start",
    "/llm/dashboard",
    "/llm/series.json",
    "/llm/report",
    "/llm/run-report",
    "/llm/summary.json",
    "/llm/run.zip",
    CSV_ROUTE,
    "/metrics",  # the Prometheus series (vllm_stress.master.promexport)
]


def cells(row) -> list[str]:
    return row.get_by_role("cell").all_inner_texts()


def verdict_kind(bound: str) -> str:
    """A level's bound without the figures in its parentheses: "client-bound", "batch-bound", "" ..."""
    return bound.split(" (")[0]


def level_or_end(progress: str) -> str | None:
    """The progress line once it shows a level going on or the run's end, else None."""
    return progress if LEVEL_LINE.search(progress) or "run ended" in progress else None


def moved_on(progress: str, level: str) -> bool:
    """The progress line shows a level other than ``level``, or the run's end."""
    shown = LEVEL_LINE.search(progress)
    return (shown is not None and shown[1] != level) or "run ended" in progress


def shows_a_level(page, rows, master: Master) -> bool:
    """The LLM tab shows the level going on with its output tok/s, or a level that has ended with its TTFT. Locust's
    page stops polling when a run stops, so a page that a loaded machine opened late, or whose polls it held back, is
    loaded again once the run has stopped."""
    going_on = rows.filter(has_text=LEVEL_ROW).first  # the first row: "Level 2/3 (4 users): holding ..."
    ended = rows.filter(has=page.get_by_role("cell", name=ENDED_LEVEL)).first  # "2 users"
    if shows_measurements(going_on, "output_tok_s") or shows_measurements(ended, "ttft_p50_ms"):
        return True
    if master.stats()["state"] == "stopped":
        page.goto(f"{master.url}/?tab={TAB}")
    return False


def shows_measurements(row, key: str) -> bool:
    """The row is on screen and shows a number > 0 in the column ``key`` of COLUMNS."""
    texts = cells(row)
    if len(texts) != len(COLUMNS):  # not shown yet
        return False
    return float(texts[list(COLUMNS).index(key)] or 0) > 0


def test_live_percentiles_come_from_bounded_histograms():
    histogram = {1.0: 50, 2.0: 45, 30.0: 5}  # bucket ms -> count
    assert bucket_percentile(histogram, 0.5) == 1 and bucket_percentile(histogram, 0.95) == 2  # ms buckets
    assert bucket_percentile(histogram, 0.99) == 30 and bucket_percentile({}, 0.5) is None
