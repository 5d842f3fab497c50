"""The live dashboard's page and script, served from the package's templates, on a Flask app without Locust."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from flask import Blueprint, Flask

from vllm_stress.webui import dashboard


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
