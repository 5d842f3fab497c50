"""The replica set over time (vllm_stress.master.replicaset): each replica listed or resolved looked at once per
scrape — up with its running and waiting requests when its /metrics answers with vLLM's gauges, down otherwise —
and a replica whose address left the Service's DNS kept, down, without a look."""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

import requests

from vllm_stress.master import replicaset
from vllm_stress.master.replicaset import ReplicaSet, look, resolve

VLLM = 'vllm:num_requests_running{engine="0"} 3.0\nvllm:num_requests_waiting{engine="0"} 5.0\n'


class Session:
    """A requests.Session stand-in: {url: exposition text, or None for a refused connection}."""

    def __init__(self, pages: dict[str, str | None]) -> None:
        self.pages = pages
        self.asked: list[str] = []

    def get(self, url: str, **_kw) -> SimpleNamespace:
        self.asked.append(url)
        if self.pages.get(url) is None:
            raise requests.ConnectionError("refused")
        return SimpleNamespace(text=self.pages[url], raise_for_status=lambda: None)


def test_a_replica_is_up_when_its_metrics_carry_vllms_gauges():
    session = Session({"http://a/metrics": VLLM, "http://b/metrics": "process_cpu_seconds_total 1.0\n"})
    assert look(session, "http://a/metrics") == (1, 3, 5)
    assert look(session, "http://b/metrics") == (0, "", "")  # answers, but not as vLLM
    assert look(session, "http://c/metrics") == (0, "", "")  # refused


def test_a_headless_services_name_resolves_to_each_address():
    assert "http://127.0.0.1:8000/metrics" in resolve("http://localhost:8000/metrics")


class Rows:
    def __init__(self) -> None:
        self.rows: list[list] = []

    def write_rows(self, rows) -> None:
        self.rows += rows


def test_a_replica_that_left_the_services_dns_stays_down_without_a_look(monkeypatch):
    options = Namespace(server_metrics_url=[], server_metrics_service="http://llm-replicas:8000/metrics")
    environment = SimpleNamespace(parsed_options=options, events=SimpleNamespace())
    environment.events.test_start = environment.events.test_stop = SimpleNamespace(add_listener=lambda _f: None)
    tracked = ReplicaSet(environment, SimpleNamespace(), SimpleNamespace(headers={}))
    pods = {"http://10.0.0.1:8000/metrics": VLLM, "http://10.0.0.2:8000/metrics": VLLM}
    tracked.session = Session(pods)
    tracked.file = Rows()  # type: ignore[assignment]
    resolved = [list(pods), ["http://10.0.0.1:8000/metrics"]]  # the second pod leaves the Service
    monkeypatch.setattr(replicaset, "resolve", lambda _url: resolved.pop(0))
    tracked.look_all()
    tracked.look_all()
    second = [row[1:] for row in tracked.file.rows[2:]]
    assert second == [["10.0.0.1:8000", 1, 3, 5], ["10.0.0.2:8000", 0, "", ""]]
    assert tracked.session.asked.count("http://10.0.0.2:8000/metrics") == 1  # looked at while listed only
