"""vllm_stress.client.recorder: a worker's rows and inter-token gaps, shipped to the master with its reports — the
requests in flight, the ITL histogram of the measured streams during a hold, the level messages, the final flush."""

from types import SimpleNamespace

import gevent
import pytest
from locust.event import EventHook

from vllm_stress.client.exchange import Exchange
from vllm_stress.client.recorder import (
    FLUSH_MESSAGE,
    LEVEL_MESSAGE,
    LEVEL_REQUEST,
    REPORT_KEY,
    ROWS_MESSAGE,
    WorkerRecorder,
)
from vllm_stress.core import schema


class Runner:
    """A worker runner's side the recorder uses: its id, message handlers, the messages it sent, stop()."""

    def __init__(self) -> None:
        self.client_id = "host_1"
        self.handlers: dict = {}
        self.sent: list = []
        self.stopped = False

    def register_message(self, name, handler) -> None:
        self.handlers[name] = handler

    def send_message(self, name, data=None) -> None:
        self.sent.append((name, data))

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def recorder():
    runner = Runner()
    events = SimpleNamespace(report_to_master=EventHook(), quitting=EventHook())
    recorder = WorkerRecorder(SimpleNamespace(runner=runner, events=events), runner.client_id)
    gevent.sleep(0)  # the greenlet that asks the master for the current level
    return recorder


def streamed(users: int, gaps: list[float], prompt_tokens: int = 100) -> Exchange:
    """A finished chat request of ``users``'s level, its output chunks ``gaps`` apart."""
    exchange = Exchange("chat", users, 100, len(gaps) + 1, check_output=True)
    now = exchange.start + 0.5
    exchange.output(now)
    for gap in gaps:
        now += gap
        exchange.output(now)
    exchange.usage({"prompt_tokens": prompt_tokens, "completion_tokens": len(gaps) + 1})
    exchange.finish()
    return exchange


def level(recorder, users: int, measuring: bool) -> None:
    """The master's level message."""
    recorder.runner.handlers[LEVEL_MESSAGE](
        recorder.environment, SimpleNamespace(data={"users": users, "measuring": measuring})
    )


def test_a_worker_asks_for_the_level_and_follows_the_masters_messages(recorder):
    assert recorder.runner.sent == [(LEVEL_REQUEST, None)]
    assert recorder.worker_id == "host_1" and (recorder.level, recorder.measuring) == (0, True)
    level(recorder, 8, False)
    assert (recorder.level, recorder.measuring) == (8, False)


def test_the_itl_histogram_holds_the_measured_streams_of_a_hold(recorder):
    in_flight = streamed(4, [0.05])
    recorder.started(in_flight)
    assert recorder.in_flight_now() == [in_flight.progress()]
    recorder.record(streamed(4, [0.0123, 0.0123, 0.25]))
    recorder.record(streamed(4, [0.0123], prompt_tokens=99))  # off its prompt target: no gaps kept
    level(recorder, 8, False)  # the next level's ramp: no hold
    recorder.record(streamed(8, [0.0123]))
    level(recorder, 8, True)
    recorder.record(streamed(8, [0.5, 1.2345]))
    recorder.record(in_flight)
    assert recorder.in_flight_now() == []
    data = {}
    recorder.environment.events.report_to_master.fire(client_id="host_1", data=data)
    delta = data[REPORT_KEY]
    assert delta["itl"] == {4: {12.3: 2, 250.0: 1, 50.0: 1}, 8: {500.0: 1, 1230.0: 1}}
    assert delta["final"] is False and delta["in_flight"] == []
    columns = [dict(zip(schema.REQUEST_COLUMNS, row, strict=True)) for row in delta["rows"]]
    assert [(c["users"], c["count_mismatch"], c["worker"]) for c in columns] == [
        (4, 0, "host_1"),
        (4, 1, "host_1"),
        (8, 0, "host_1"),
        (8, 0, "host_1"),
        (4, 0, "host_1"),
    ]
    recorder.environment.events.report_to_master.fire(client_id="host_1", data=data)
    assert data[REPORT_KEY]["rows"] == [] and data[REPORT_KEY]["itl"] == {}  # a delta: nothing twice


def test_a_flush_stops_the_users_and_sends_every_row_marked_final(recorder):
    recorder.record(streamed(2, [0.01]))
    recorder.runner.handlers[FLUSH_MESSAGE](recorder.environment, SimpleNamespace(data=None))
    assert recorder.runner.stopped
    name, delta = recorder.runner.sent[-1]
    assert (
        name == ROWS_MESSAGE and delta["final"] is True and len(delta["rows"]) == 1 and delta["itl"] == {2: {10.0: 1}}
    )
    recorder.environment.events.quitting.fire(environment=recorder.environment)  # quitting by itself: again, empty
    assert recorder.runner.sent[-1][1]["rows"] == [] and recorder.runner.sent[-1][1]["final"] is True
