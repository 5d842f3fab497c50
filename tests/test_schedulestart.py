"""One schedule start for every worker (vllm_stress.master.schedulestart), the two sides with Locust's messages
handed over by hand: the master sends one start once every worker is ready, the same to a worker ready later; each
worker counts its arrival clock from it and reports its clock offset, which run.json keeps with their spread."""

import time
from types import SimpleNamespace

import pytest
from locust.event import Events
from locust.rpc.protocol import Message

from vllm_stress.analysis.features.traces import skew_paragraph
from vllm_stress.client.pacing import OpenLoopArrivals
from vllm_stress.master.schedulestart import (
    READY_MESSAGE,
    START_LEAD_S,
    START_MESSAGE,
    STARTED_MESSAGE,
    MasterStart,
    WorkerStart,
)


class Runner:
    """A runner's messages, kept: the handlers it registered and what it sent (type, data, client_id)."""

    def __init__(self, worker_count=0):
        self.worker_count = worker_count
        self.handlers = {}
        self.sent = []

    def register_message(self, message_type, handler):
        self.handlers[message_type] = handler

    def send_message(self, message_type, data=None, client_id=None):
        self.sent.append((message_type, data, client_id))

    def receive(self, message_type, data, node_id):
        self.handlers[message_type](environment=None, msg=Message(message_type, data, node_id))


class Run:
    def __init__(self):
        self.meta = {}

    def update(self, values):
        self.meta.update(values)


def master(worker_count):
    runner, run, events = Runner(worker_count), Run(), Events()
    environment = SimpleNamespace(events=events, parsed_options=SimpleNamespace(trace="t.jsonl", arrival_rate=0))
    MasterStart(environment, runner, run)
    events.test_start.fire(environment=environment)
    return runner, run, environment


def test_the_master_sends_one_start_once_every_worker_is_ready_and_the_same_to_a_late_one():
    runner, run, environment = master(worker_count=2)
    runner.receive(READY_MESSAGE, {"sent": time.time()}, "a")
    assert runner.sent == []  # one worker of two is ready: no start yet
    before = time.time()
    runner.receive(READY_MESSAGE, {"sent": time.time()}, "b")
    starts = {client: data["start"] for kind, data, client in runner.sent if kind == START_MESSAGE}
    assert sorted(starts) == ["a", "b"] and len(set(starts.values())) == 1
    assert starts["a"] >= before + START_LEAD_S  # time for the message to reach them before it
    runner.receive(READY_MESSAGE, {"sent": time.time()}, "c")  # joined later: the schedule already runs
    assert runner.sent[-1][2] == "c" and runner.sent[-1][1]["start"] == starts["a"]
    runner.receive(STARTED_MESSAGE, {"offset_s": 0.0004, "round_trip_s": 0.002, "ahead_s": 0.99}, "a")
    runner.receive(STARTED_MESSAGE, {"offset_s": -0.0011, "round_trip_s": 0.003, "ahead_s": -0.2}, "b")
    assert run.meta["schedule_start"] == {
        "start": starts["a"],
        "workers": {
            "a": {"clock_offset_ms": 0.4, "round_trip_ms": 2.0, "ahead_ms": 990.0},
            "b": {"clock_offset_ms": -1.1, "round_trip_ms": 3.0, "ahead_ms": -200.0},
        },
        "skew_ms": 1.5,
    }
    environment.events.test_stop.fire()
    assert skew_paragraph(run.meta["schedule_start"]).text == (
        "The 2 workers counted the schedule from one start sent by the master; their clocks were 1.5 ms apart (each "
        "worker's offset from the master's, estimated within 1.5 ms from a message round trip); 1 had the start only "
        "after it: their first sends were late."
    )


def test_a_worker_counts_its_clock_from_the_start_and_reports_its_offset(monkeypatch):
    runner, arrivals = Runner(), OpenLoopArrivals(10.0, seed=1)
    worker = WorkerStart(runner)
    monkeypatch.setattr(time, "time", lambda: 1000.0)
    worker.ready(arrivals)
    assert runner.sent == [(READY_MESSAGE, {"sent": 1000.0}, None)]
    assert not arrivals.start_set.is_set()  # its users wait for the start
    # the master's clock 2 s ahead: it received the ready at 1002.01 (10 ms on the way), sent the start at 1002.5,
    # received 20 ms later at the worker's 1000.52
    monkeypatch.setattr(time, "time", lambda: 1000.52)
    monkeypatch.setattr(time, "perf_counter", lambda: 50.0)
    runner.receive(START_MESSAGE, {"start": 1001.5, "ready_received": 1002.01, "sent": 1002.5}, "master")
    assert arrivals.started == pytest.approx(50.98)  # 0.98 s after now, by this host's clock
    kind, report, _ = runner.sent[-1]
    assert kind == STARTED_MESSAGE
    assert report["offset_s"] == pytest.approx(1.995) and report["round_trip_s"] == pytest.approx(0.03)
    assert report["ahead_s"] == pytest.approx(0.98)
