"""What every user class shares: the options, the run's recorder, the target's model and prompts, and the
request flow of the HTTP users (one request per task, timed per chunk, recorded whatever happens).

Locust pitfalls this flow avoids (docs/locust.md §1-2): chunks are read with
``stream.readline`` (``iter_content``/``iter_lines`` wait for 1 KiB and delay TTFT); every exception is caught
inside the ``catch_response`` block (else Locust drops the request from its stats); the built-in response time
is replaced by the end-to-end latency (it is only time-to-headers for streams); the body is drained to its end so
the connection is reused; TTFT and TPOT are logged into their own stats entries with ``StatsEntry.log`` so that
they show in the console, CSVs and web UI without inflating the request rate.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import ssl
import time

import gevent
import gevent.event
import locust.runners
from geventhttpclient.response import HTTPParseError
from locust import FastHttpUser, events, task
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from locustfiles import options as opts
from locustfiles import webui
from locustfiles.exchange import REQUEST_ID_HEADER, Exchange, StreamError, error_event, response_error
from locustfiles.pacing import arrivals_for
from locustfiles.prompts import Tokenizer, build_workload, load_dataset
from locustfiles.recorder import Recorder
from locustfiles.stream import KERNEL_CLOCK, SSEParser, deadline_only, read_body, receive_clock, report_clocks
from locustfiles.stream import clocks as receive_clocks
from locustfiles.stream import receive_clocks as receive_worker_clocks
from locustfiles.telemetry import Telemetry, report_worker_cpu
from locustfiles.trace import TraceDone, arrivals_for_trace, read_trace

log = logging.getLogger(__name__)


# Heartbeats a worker may miss before the master calls it missing (Locust's default, 3, drops a worker whose loop
# is starved for 3 s, e.g. while it times 1,000 streams on a shared core; the master then stops the whole test).
locust.runners.HEARTBEAT_LIVENESS = 10
# Seconds without a heartbeat from the master before a worker quits by itself (Locust's default: 60), so that the
# workers of a master that was killed do not keep loading the server for a minute.
locust.runners.MASTER_HEARTBEAT_TIMEOUT = 15
# A user whose request got no response at all waits this long before its next one, so that a server that is down is
# not hammered in a tight loop (and requests.csv does not fill with thousands of refusals a second).
NO_RESPONSE_PAUSE_S = 0.5


class Target:
    """The server under test as this process sees it: model, headers, (on load generators) the workload, and (on
    the master or local runner) its telemetry."""

    def __init__(self, environment) -> None:
        self.environment = environment
        self.recorder = Recorder(environment)
        self.telemetry = None
        if isinstance(environment.runner, WorkerRunner):
            report_worker_cpu(environment)  # the master writes it into client_health.csv
        else:
            self.telemetry = Telemetry(environment, self.recorder)
        self.model = ""
        self.headers: dict = {}
        self.workloads: dict[bool, object] = {}  # chat template or not -> Workload
        self.prepared = gevent.event.Event()  # set when prepare() is over (successful or not): users wait for it
        self.arrivals = None  # open-loop arrival clock (--arrival-rate), None for a closed loop

    def prepare(self) -> None:
        """Check the options, resolve the model and headers (at test start, when workers have the master's options);
        the master or local runner also checks that the server serves the model and fits the lengths. Raises
        StopTarget with a one-line reason."""
        options = self.environment.parsed_options
        validate(options)
        try:
            key = opts.api_key(options)
        except OSError as e:
            raise StopTarget(f"--api-key-file: {e}") from None
        self.headers = {"Accept-Encoding": "identity"} | ({"Authorization": f"Bearer {key}"} if key else {})
        needs_model = any(getattr(cls, "needs_model", True) for cls in self.environment.user_classes)
        served = self.served_models(required=not options.model) if needs_model else {}
        self.model = options.model or (next(iter(served)) if needs_model else "")
        if not isinstance(self.environment.runner, WorkerRunner):
            check_model(options, self.model, served, self.environment.host)
        self.workloads.clear()
        if not isinstance(self.environment.runner, MasterRunner):  # the processes that run users
            for chat in {getattr(cls, "chat", False) for cls in self.environment.user_classes}:
                self.workloads[chat] = self.build_workload(chat)
            if options.trace:  # once the prompts are ready: no backlog
                worker_index = getattr(self.environment.runner, "worker_index", 0)
                self.arrivals = arrivals_for_trace(options, read_trace(options.trace), worker_index)
            else:
                self.arrivals = arrivals_for(options, seed=os.getpid())

    def served_models(self, required: bool) -> dict[str, int | None]:
        """{model: max_model_len or None} from ``/v1/models``. A server that cannot be reached is refused; one that
        does not list models only when the list is ``required`` (no --model given)."""
        import requests

        url = self.environment.host.rstrip("/") + "/v1/models"
        try:
            resp = requests.get(url, headers=self.headers, timeout=30, verify=not self.environment.parsed_options.insecure)
        except requests.RequestException as e:
            raise StopTarget(f"cannot reach the server: GET {url}: {connection_problem(e)}") from None
        try:
            resp.raise_for_status()
            served = {card["id"]: card.get("max_model_len") for card in resp.json()["data"]}
            if not served:
                raise ValueError("no model listed")
            return served
        except (requests.RequestException, ValueError, KeyError, TypeError) as e:
            if required:
                raise StopTarget(f"cannot list models at {url}: {e}") from None
            return {}

    def build_workload(self, chat: bool):
        """The prompts for chat (template counted) or plain prompts, sized once per process and run."""
        options = self.environment.parsed_options
        tokenizer = Tokenizer(self.environment.host, self.model, self.headers, chat, verify=not options.insecure)
        workload = build_workload(tokenizer, options, seed=os.getpid() ^ int(time.time()))
        log.info("Prompts sized for %s with %d /tokenize calls", self.model, tokenizer.calls)
        return workload


class StopTarget(Exception):
    pass


def validate(options) -> None:
    """Refuse option values that no run can use, with a one-line StopTarget."""
    if getattr(options, "repeats", 1) > 1:  # a scenario's `repeats` (scenarios/shape.py): only the runner repeats
        raise StopTarget(f"repeats = {options.repeats}: plain Locust runs once; use `python -m scenarios run`, or pass "
                         "--repeats 1 and run it that many times into separate --results-dir folders")
    for flag, value in (("--input-tokens", options.input_tokens), ("--output-tokens", options.output_tokens)):
        if value < 1:
            raise StopTarget(f"{flag} must be at least 1, got {value}")
    if not options.request_timeout > 0:
        raise StopTarget(f"--request-timeout must be more than 0 seconds, got {options.request_timeout:g}")
    if not 0 <= options.prefix_tokens < options.input_tokens:
        raise StopTarget(f"--prefix-tokens must be at least 0 and less than --input-tokens ({options.input_tokens}), "
                         f"got {options.prefix_tokens}")
    if options.prefix_groups < 1:
        raise StopTarget(f"--prefix-groups must be at least 1, got {options.prefix_groups}")
    if options.token_spread < 0:
        raise StopTarget(f"--token-spread must not be negative, got {options.token_spread:g}")
    if options.dataset:
        try:
            load_dataset(options.dataset)
        except (OSError, ValueError) as e:
            raise StopTarget(f"--dataset: {e}") from None
    if options.trace:
        if options.arrival_rate:
            raise StopTarget("--trace and --arrival-rate both set when to send: give one")
        if not options.speedup > 0:
            raise StopTarget(f"--speedup must be more than 0, got {options.speedup:g}")
        try:
            read_trace(options.trace)
        except (OSError, ValueError) as e:
            raise StopTarget(f"--trace: {e}") from None


def check_model(options, model: str, served: dict[str, int | None], host: str) -> None:
    """The server must serve ``model``, and the target lengths must fit its max_model_len (when it lists them)."""
    if served and model not in served:
        raise StopTarget(f"model {model!r} is not served by {host} (it serves: {', '.join(served)})")
    max_model_len = served.get(model)
    if not max_model_len:
        return
    if options.dataset:  # prompt lengths are the dataset's
        if options.output_tokens >= max_model_len:
            raise StopTarget(f"--output-tokens {options.output_tokens} leaves no room for a prompt in "
                             f"{model}'s max_model_len of {max_model_len}")
    elif options.input_tokens + options.output_tokens > max_model_len:
        raise StopTarget(f"--input-tokens {options.input_tokens} + --output-tokens {options.output_tokens} = "
                         f"{options.input_tokens + options.output_tokens} tokens exceeds {model}'s max_model_len of "
                         f"{max_model_len} at {host}")


def connection_problem(exc: Exception) -> str:
    """The root cause of a failed connection in a few words, from a requests exception."""
    text = str(exc)
    if tls := re.search(r"\[SSL: \w+\] ([^(]+)", text):
        return f"TLS error: {tls[1].strip()} (a self-signed test server needs --insecure)"
    if errno := re.search(r"\[Errno -?\d+\] ([^'\")]+)", text):
        return errno[1].strip()
    return f"{type(exc).__name__}: {text}"


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    opts.add_arguments(parser)


events.report_to_master.add_listener(report_clocks)
events.worker_report.add_listener(receive_worker_clocks)


@events.init.add_listener
def _on_init(environment, **_kw) -> None:
    environment.llm_target = Target(environment)
    if environment.web_ui:  # the master's or the local runner's
        webui.register(environment.web_ui, environment.llm_target)
    if getattr(environment, "llm_prepare_pending", False):  # test_start came first
        prepare_target(environment)


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    if not hasattr(environment, "llm_target"):
        # a worker that joins a running test can get its spawn message (and fire test_start) while it connects,
        # before Locust has even set environment.runner and fired init: prepare at init (its users wait for it)
        environment.llm_prepare_pending = True
        return
    prepare_target(environment)


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    arrivals = getattr(getattr(environment, "llm_target", None), "arrivals", None)
    if arrivals:
        log.info("%s", arrivals.summary())


def prepare_target(environment) -> None:
    llm_target = environment.llm_target
    llm_target.prepared.clear()
    try:
        llm_target.prepare()
    except StopTarget as e:
        log.error("%s", e)
        environment.process_exit_code = 2
        if not isinstance(environment.runner, WorkerRunner):  # a worker's users stop; its master quits ...
            headless = environment.parsed_options is None or environment.parsed_options.headless
            gevent.spawn(environment.runner.quit if headless else environment.runner.stop)  # ... or keeps its web UI
    finally:
        llm_target.prepared.set()


def failure_name(exc: BaseException) -> str:
    """A stable, readable failure class for an exception raised while sending or reading a request."""
    if getattr(exc, "original", None) is not None:  # geventhttpclient's RetriesExceeded wraps the real error
        return failure_name(exc.original)
    if isinstance(exc, StreamError):
        return exc.name
    if isinstance(exc, (gevent.Timeout, TimeoutError, socket.timeout)):
        return "Timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "ConnectionRefused"
    if isinstance(exc, ssl.SSLError):  # e.g. an untrusted certificate (see --insecure)
        return "TLSError"
    if isinstance(exc, (HTTPParseError, ConnectionError, OSError)):
        return "StreamTruncated"
    if isinstance(exc, ValueError):
        return "MalformedJSON"
    return type(exc).__name__


def log_token_stats(environment, exchange: Exchange) -> None:
    """TTFT and TPOT into their own Locust stats entries (milliseconds), outside the request totals."""
    if exchange.ttft is not None:
        environment.stats.get(exchange.name, "TTFT").log(exchange.ttft * 1000, 0)
    if exchange.tpot is not None:
        environment.stats.get(exchange.name, "TPOT").log(exchange.tpot * 1000, 0)


def run_request(user, send) -> None:
    """Send the user's next request with ``send(spec, exchange)`` and record it, whatever happens."""
    if user.workload is None:  # the target could not be prepared (logged at test start): stop, quietly (Locust
        raise StopUser()  # logs a traceback for a StopUser from on_start, not from a task)
    try:
        lag = user.target.arrivals.wait() if user.target.arrivals else None
    except TraceDone:
        raise StopUser() from None
    line = getattr(user.target.arrivals, "last", None)  # the trace line just taken (the same greenlet, no yield)
    spec = user.workload.trace_request(line) if line else user.workload.next_request()
    exchange = Exchange(user.request_name, user.target.recorder.level, spec.target_prompt_tokens, spec.max_tokens,
                        check_output=user.ignore_eos)
    exchange.schedule_lag = lag
    user.target.recorder.started(exchange)
    try:
        send(spec, exchange)
    finally:  # also when the user is stopped mid-request: the row says so
        if exchange.end is None:
            exchange.fail("Aborted")
        user.target.recorder.record(exchange)
    if exchange.error and not exchange.status:  # no answer at all (refused, reset, timed out): the server may be down
        gevent.sleep(NO_RESPONSE_PAUSE_S)


def sampling(user, spec) -> dict:
    """The request fields that force the output length, shared by the OpenAI-style APIs."""
    fields = {"max_tokens": spec.max_tokens, "stream": user.stream}
    if user.target.model:
        fields["model"] = user.target.model
    if user.ignore_eos:
        fields |= {"ignore_eos": True, "min_tokens": spec.max_tokens}
    if user.temperature is not None:
        fields["temperature"] = user.temperature
    if user.stream:
        fields["stream_options"] = {"include_usage": True}
    return fields


def read_options(user, environment) -> None:
    """Copy the per-request options onto a user."""
    options = environment.parsed_options
    user.target = environment.llm_target
    user.stream = not options.no_stream
    user.ignore_eos = not options.no_ignore_eos
    user.timeout = options.request_timeout
    user.temperature = options.temperature


def start_user(user) -> None:
    """on_start of every user class: take the prepared workload (None when the target could not be prepared)."""
    user.target.prepared.wait()
    user.workload = user.target.workloads.get(user.chat)


class LLMUser(FastHttpUser):
    """A closed-loop client: sends one request, waits for its whole answer, sends the next.

    Subclasses say where (``path``), what (``body``) and what counts as output in a streamed choice
    (``is_output``), and how a non-streamed response carries its result (``read_json``).
    """

    abstract = True
    path = ""
    request_name = ""  # the name of its entries in Locust's stats and of its rows
    chat = False  # prompts are chat messages (the template's tokens count toward the input length)
    needs_model = True  # the API takes a model name (default: the first the server lists)
    output_marker = b"\0"  # bytes that only an output-bearing chunk in vLLM's layout has (see read_stream)
    kernel_clock = False  # time chunks by the kernel's receive time (stream.py), set per process at start

    def __init__(self, environment) -> None:
        options = environment.parsed_options
        self.network_timeout = options.request_timeout  # per socket read: a silent server fails as Timeout
        self.connection_timeout = min(options.request_timeout, 30.0)
        self.insecure = options.insecure
        self.concurrency = 1
        super().__init__(environment)
        read_options(self, environment)

    def on_start(self) -> None:
        start_user(self)
        clock = receive_clock(self.host or "")
        self.kernel_clock = clock == KERNEL_CLOCK
        receive_clocks[self.target.recorder.worker_id] = clock

    @task
    def request(self) -> None:
        run_request(self, self.send)

    def send(self, spec, exchange: Exchange) -> None:
        headers = self.target.headers | {REQUEST_ID_HEADER: exchange.request_id, "Content-Type": "application/json"}
        payload = json.dumps(self.body(spec)).encode()
        exchange.sent()  # as late as a Locust user can take it: the session's own request building follows
        with self.client.post(self.path, data=payload, headers=headers, stream=self.stream,
                              catch_response=True, name=self.request_name) as resp:
            exchange.status = resp.status_code
            remaining = max(self.timeout - (time.perf_counter() - exchange.start), 0.001)
            try:
                with gevent.Timeout(remaining, StreamError("Timeout")):
                    self.check_status(resp)
                    if self.stream:
                        with deadline_only(resp.stream):
                            self.read_stream(resp.stream, exchange)
                    else:
                        self.read_json(json.loads(resp.content), exchange)
            except Exception as e:  # must not escape the block: Locust would drop the request from its stats
                exchange.fail(failure_name(e))
            exchange.finish()
            resp.request_meta["response_time"] = exchange.e2e * 1000
            resp.request_meta["response_length"] = exchange.completion_tokens or 0
            if exchange.error:
                resp.failure(exchange.error)
            else:
                resp.success()
        if not exchange.error:
            log_token_stats(self.environment, exchange)

    @staticmethod
    def check_status(resp) -> None:
        if resp.status_code == 0:  # no response: Locust's FastHttpSession keeps the exception
            raise resp.error
        if resp.status_code != 200:
            raise response_error(resp.status_code, resp.content or b"")

    def read_stream(self, stream, exchange: Exchange) -> None:
        """Read an OpenAI-style SSE body to its end, timing each output-bearing chunk (``stream.py``)."""
        read_body(stream, SSEParser(exchange, self.output_marker, self.is_output), exchange, self.kernel_clock)

    def body(self, spec) -> dict:
        raise NotImplementedError

    def is_output(self, choice: dict) -> bool:
        raise NotImplementedError

    def read_json(self, response: dict, exchange: Exchange) -> None:
        if "error" in response:
            raise error_event(response)
        exchange.usage(response.get("usage") or {})
        exchange.finish_reason = (response.get("choices") or [{}])[0].get("finish_reason") or ""
