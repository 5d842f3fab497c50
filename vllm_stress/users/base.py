"""The request flow every user class shares, and ``LLMUser``, the base of the HTTP users."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, cast

import gevent
from locust import FastHttpUser, task
from locust.exception import StopUser

from vllm_stress.client.adapters import AdapterPool, adapter_pool, model_field
from vllm_stress.client.affinity import Spread, affinity_header
from vllm_stress.client.canary import CANARY_SAMPLING
from vllm_stress.client.cancel import Cancelled, deadline
from vllm_stress.client.classes import canary_model, request_fields, stats_name
from vllm_stress.client.cookies import use_lean_cookies
from vllm_stress.client.exchange import (
    REQUEST_ID_HEADER,
    TRACEPARENT_HEADER,
    Exchange,
    error_event,
    response_error,
)
from vllm_stress.client.pools import opened, opening, use_pools
from vllm_stress.client.prompts import RequestSpec, Workload
from vllm_stress.client.sse import SSEParser
from vllm_stress.client.stream import (
    KERNEL_CLOCK,
    deadline_only,
    read_body,
    receive_clock,
    use_send_time,
)
from vllm_stress.client.stream import clocks as receive_clocks
from vllm_stress.client.structured import judge
from vllm_stress.client.trace import TraceDone
from vllm_stress.core import fleet
from vllm_stress.core.classes import TrafficClass
from vllm_stress.core.failures import failure_name
from vllm_stress.core.schema import CANCELLED, SESSION_PRIMER
from vllm_stress.core.spans import traceparent
from vllm_stress.users import plugin  # noqa: F401 (the suite's options and event listeners, for every user class)
from vllm_stress.users.target import TARGETS, Target

if TYPE_CHECKING:
    from geventhttpclient.response import HTTPSocketPoolResponse
    from locust.contrib.fasthttp import ResponseContextManager
    from locust.env import Environment

# A user whose request got no response at all waits this long before its next one, so that a server that is down is
# not hammered in a tight loop (and requests.csv does not fill with thousands of refusals a second).
NO_RESPONSE_PAUSE_S = 0.5

Send = Callable[[RequestSpec, Exchange], None]  # sends one request and fills its exchange


class FlowUser(Protocol):
    """What a user class gives the request flow: its requests' name and kind, the target and prepared workload
    (``start_user``), and the per-request options (``read_options``)."""

    request_name: str
    path: str  # the API path its requests go to (the rows' endpoint)
    chat: bool
    target: Target
    workload: Workload | None
    stream: bool
    ignore_eos: bool
    timeout: float
    temperature: float | None
    thinking: bool
    reasoning_effort: str | None
    no_traceparent: bool
    adapters: AdapterPool | None
    traffic_class: TrafficClass | None  # --traffic-class: the user's class (start_user), else None


def log_token_stats(environment: Environment, exchange: Exchange) -> None:
    """TTFT and TPOT into their own Locust stats entries (milliseconds), outside the request totals."""
    # Locust logs float response times itself, but StatsEntry.log's annotation says int: hence the two ignores
    name = exchange.stats_name
    if exchange.ttft is not None:
        environment.stats.get(name, "TTFT").log(exchange.ttft * 1000, 0)  # type: ignore[arg-type]
    if exchange.tpot is not None:
        environment.stats.get(name, "TPOT").log(exchange.tpot * 1000, 0)  # type: ignore[arg-type]


def run_request(user: FlowUser, send: Send) -> None:
    """Send the user's next request with ``send(spec, exchange)`` and record it, whatever happens."""
    if user.workload is None:  # the target could not be prepared (logged at test start): stop, quietly (Locust
        raise StopUser()  # logs a traceback for a StopUser from on_start, not from a task)
    try:
        lag = user.target.arrivals.wait() if user.target.arrivals else None
    except TraceDone:
        raise StopUser() from None
    line = getattr(user.target.arrivals, "last", None)  # the trace line just taken (the same greenlet, no yield)
    burst = getattr(user.target.arrivals, "burst", None)  # its microburst, likewise
    if line:  # a trace's request is replayed as it was: never a canary
        spec = user.workload.trace_request(line, user.target.options.trace_block_size)
    else:
        spec = canary_request(user) or user.workload.next_request()
    if not spec.canary and user.target.schemas and getattr(user, "takes_schemas", False):
        spec = replace(spec, json_schema=user.target.schemas.next())
    send_request(user, spec, send, lag, burst=burst)


def canary_request(user: FlowUser) -> RequestSpec | None:
    """The canary the user's next request at this level is (--canary-share), or None for its own request."""
    canaries = user.target.canaries
    if canaries and getattr(user, "takes_canaries", True) and (canary := canaries.next(user.target.recorder.level)):
        return RequestSpec(canary.text, None, canary.max_tokens, canary=canary)
    return None


def send_request(
    user: FlowUser,
    spec: RequestSpec,
    send: Send,
    lag: float | None = None,
    session: tuple[str, int] | None = None,
    burst: int | None = None,
    primer: bool = False,
) -> Exchange:
    """Send ``spec`` with ``send(spec, exchange)`` and record it, whatever happens; ``session`` is the (session id,
    turn) of a multi-turn conversation's request (locustfiles/session.py), ``burst`` the microburst it is sent in;
    ``primer``: a session's primer (--session-primer), named SESSION_PRIMER, never cancelled, sent for its prefill
    so an answer without text is its success. Returns the recorded exchange."""
    exchange = Exchange(
        SESSION_PRIMER if primer else user.request_name,
        user.target.recorder.level,
        spec.target_prompt_tokens,
        spec.max_tokens,
        check_output=user.ignore_eos
        and getattr(user, "forces_output", True)
        and spec.canary is None
        and spec.json_schema is None,
    )
    exchange.endpoint = user.path
    exchange.output_needed = not primer
    exchange.traffic_class = user.traffic_class.name if user.traffic_class else ""
    apart = spec.canary is not None and not user.target.options.canaries_in_figures
    exchange.stats_name = stats_name(exchange.name, exchange.traffic_class, canary=apart)
    if spec.canary:  # its answer is kept, with the model it asked (no --lora-adapters draw, no class model unasked)
        exchange.canary, exchange.text = spec.canary, []
        exchange.model = canary_model(user.traffic_class, user.target.model)
    if spec.json_schema:
        exchange.json_schema, exchange.text = spec.json_schema, []
    exchange.schedule_lag, exchange.burst = lag, burst
    if user.adapters and not spec.canary:  # --lora-adapters: this request's model (model_field)
        exchange.adapter = user.adapters.draw()
    exchange.images, exchange.image_tokens = len(spec.images), spec.image_tokens
    exchange.shared_prefix_tokens = spec.shared_prefix_tokens
    exchange.trace_blocks, exchange.trace_reused_blocks = spec.trace_blocks, spec.trace_reused_blocks
    exchange.session_turns = spec.session_turns
    exchange.image_bytes = sum(len(url) for url in spec.images)
    exchange.videos, exchange.video_tokens = len(spec.videos), spec.video_tokens
    exchange.video_bytes = sum(len(url) for url in spec.videos)
    if session:
        exchange.session_id, exchange.turn = session
    cancellable = not (spec.canary or primer) and getattr(user, "cancellable", True)
    if user.target.cancellations and cancellable:  # --cancel-share
        exchange.cut_at(user.target.cancellations.draw())
    user.target.recorder.started(exchange)
    try:
        send(spec, exchange)
    finally:  # also when the user is stopped mid-request: the row says so
        if exchange.end is None:
            exchange.fail("Aborted")
        if exchange.json_schema and not exchange.error:
            exchange.answer_valid = judge(exchange.json_schema, "".join(exchange.text or ()), exchange.finish_reason)
        user.target.recorder.record(exchange)
    if exchange.error and not exchange.status:  # no answer at all (refused, reset, timed out): the server may be down
        gevent.sleep(NO_RESPONSE_PAUSE_S)
    return exchange


def sampling(user: FlowUser, spec: RequestSpec) -> dict[str, Any]:
    """The request fields that force the output length, shared by the OpenAI-style APIs."""
    fields: dict[str, Any] = {"max_tokens": spec.max_tokens, "stream": user.stream}
    if user.target.model:
        fields["model"] = user.target.model
    if spec.canary:  # the same prompt must get the same answer: greedy, seeded, its own length
        fields |= CANARY_SAMPLING
    elif user.ignore_eos and not spec.json_schema:  # a grammar's answer ends with EOS (client/structured.py)
        fields |= {"ignore_eos": True, "min_tokens": spec.max_tokens}
    if user.temperature is not None and not spec.canary:
        fields["temperature"] = user.temperature
    if user.chat and not user.thinking:  # Qwen3's switch, and DeepSeek-V3.1+'s and Kimi-K2's (docs: --thinking)
        fields["chat_template_kwargs"] = {"enable_thinking": False, "thinking": False}
    if user.chat and user.reasoning_effort:
        fields["reasoning_effort"] = user.reasoning_effort
    if user.stream:
        fields["stream_options"] = {"include_usage": True}
    return fields | request_fields(user.traffic_class, canary=spec.canary is not None)


def read_options(user: FlowUser, environment: Environment) -> None:
    """Copy the per-request options onto a user."""
    user.target = TARGETS[environment]
    options = user.target.options
    user.stream = not options.no_stream
    user.ignore_eos = not options.no_ignore_eos
    user.timeout = options.request_timeout
    user.temperature = options.temperature
    user.thinking = options.thinking == "on"
    user.reasoning_effort = options.reasoning_effort
    user.no_traceparent = options.no_traceparent
    user.adapters = adapter_pool(options)


def id_headers(user: FlowUser, exchange: Exchange) -> dict[str, str]:
    """The request's ``X-Request-Id`` and, unless --no-traceparent, its W3C ``traceparent`` (trace id from the
    request id: vllm_stress.core.spans)."""
    headers = {REQUEST_ID_HEADER: exchange.request_id}
    if not user.no_traceparent:
        headers[TRACEPARENT_HEADER] = traceparent(exchange.request_id)
    return headers


def start_user(user: FlowUser) -> None:
    """on_start of every user class: take the prepared workload (None when the target could not be prepared)."""
    user.target.prepared.wait()
    user.workload = user.target.workloads.get(user.chat)
    user.traffic_class = None
    if user.target.classes and user.workload is not None:  # --traffic-class: the user's class and its prompts
        user.traffic_class, user.workload = user.target.classes.take(user.chat)


class LLMUser(FastHttpUser):
    """A closed-loop client: one request, its whole answer, the next. Subclasses give ``path``, ``body``,
    ``is_output`` (a streamed choice) and ``read_json`` (a non-streamed response)."""

    abstract = True
    path = ""
    request_name = ""  # the name of its entries in Locust's stats and of its rows
    chat = False  # prompts are chat messages (the template's tokens count toward the input length)
    needs_model = True  # the API takes a model name (default: the first the server lists)
    takes_schemas = False  # --json-schema asks some of its requests for a structured output (chat and completions)
    forces_output = True  # ignore_eos reaches the server: with it, the output's length is checked against its target
    output_marker = b"\0"  # bytes that only an output-bearing chunk in vLLM's layout has (see read_stream)
    connections = 1  # connections the user may hold at once (an agent's fan-out: users/agent.py)
    apis: dict[str, type[LLMUser]] = {}  # request name -> the user its request task hands a class of that api= to
    sticky_headers: dict[str, str] = {}  # headers of every request of the user (a session's id, session.py)
    target: Target  # FlowUser's: set by read_options and start_user
    workload: Workload | None
    stream: bool
    ignore_eos: bool
    timeout: float
    temperature: float | None
    thinking: bool
    reasoning_effort: str | None
    affinity_header: str  # the header a router pins a session or prefix group by ("" : none)
    no_traceparent: bool
    adapters: AdapterPool | None
    traffic_class: TrafficClass | None
    sender: LLMUser  # who sends the user's requests: itself, or the user of its class's api (on_start)

    def __init__(self, environment: Environment) -> None:
        options = TARGETS[environment].options
        self.network_timeout = options.request_timeout  # per socket read: a silent server fails as Timeout
        self.connection_timeout = min(options.request_timeout, 30.0)
        self.insecure = options.insecure
        self.concurrency = self.connections
        super().__init__(environment)
        read_options(self, environment)
        self.affinity_header = affinity_header(options.session_header, options.router_preset)
        self.spread = Spread(fleet.replica_urls(self.host or "") or [""], options.replica_spread == "user")
        # with client-side spreading, each replica's absolute URL of this user's path and its name on the rows
        self.replica_targets = {base: (base + self.path, fleet.replica_name(base)) for base in self.spread.replicas}
        use_lean_cookies(self.client)
        # connections timed as they open (--connections: how long they live); under the kernel clock, chunks timed
        # by the kernel's receive time (stream.py)
        use_pools(self.client, receive_clock(self.host or "") == KERNEL_CLOCK, options.connections)

    def on_start(self) -> None:
        start_user(self)
        receive_clocks[self.target.recorder.worker_id] = receive_clock(self.host or "")
        self.sender = self.class_sender()

    @task
    def request(self) -> None:
        run_request(self.sender, self.sender.send)

    @classmethod
    def api_user(cls, api: str) -> type[LLMUser] | None:
        """The user class that sends the requests of a traffic class naming ``api`` ("": none) for a user of this
        class: itself for its own, the user of that API its request task hands them to (``apis``), else None (a
        session's or an agent's task sends its own)."""
        if api in ("", cls.request_name):
            return cls
        return cls.apis.get(api) if LLMUser.request in cls.tasks else None

    def class_sender(self) -> LLMUser:
        """Itself, or when its traffic class names another API (api=embeddings: a mixed fleet) a user of that API
        made for it, with its class and the class's prompts of that API's kind: its rows, canaries (none for a
        pooling API) and lengths are that user's."""
        traffic_class = self.traffic_class
        api_user = self.api_user(traffic_class.api) if traffic_class else None
        if traffic_class is None or api_user is type(self):
            return self
        assert api_user is not None and self.target.classes is not None  # the test start checked (Target.prepare)
        api_user.host = self.host  # as Locust gives its user classes at each start
        sender = api_user(self.environment)
        sender.traffic_class = traffic_class
        sender.workload = self.target.classes.workload(sender.chat, traffic_class)
        return sender

    def send(self, spec: RequestSpec, exchange: Exchange) -> None:
        prefix = self.affinity_header and spec.prefix_group is not None
        payload, content_type = self.encode(spec, exchange)
        headers = (
            self.target.headers
            | ({self.affinity_header: f"prefix-{spec.prefix_group}"} if prefix else {})
            | ({} if spec.canary else self.sticky_headers)  # a canary is no part of a session
            | id_headers(self, exchange)
            | {"Content-Type": content_type}
        )
        url = self.path
        if len(self.spread.replicas) > 1:  # client-side spreading: an absolute URL, the replica on the row
            url, exchange.replica = self.replica_targets[self.spread.next()]
        exchange.sent()  # as late as a Locust user can take it: the session's own request building follows
        opening()
        # a request the client cancelled leaves the block by Cancelled: Locust's stats count it nowhere (as the
        # streams a stop cuts), like every figure of the suite
        try:
            with (
                contextlib.suppress(Cancelled),
                self.client.post(
                    url,
                    data=payload,  # type: ignore[arg-type]  # Locust's docstring takes bytes; its annotation: str | dict
                    headers=headers,
                    stream=self.stream,
                    catch_response=True,
                    name=exchange.stats_name,
                ) as resp,
            ):
                self.take_answer(resp, exchange)
        finally:  # also when the stop cut it waiting for the headers: its connection was made
            exchange.connect = opened()
        if not exchange.error:
            log_token_stats(self.environment, exchange)

    def take_answer(self, resp: ResponseContextManager, exchange: Exchange) -> None:
        """Read the answer ``resp`` brings into ``exchange`` and give Locust's stats its outcome."""
        exchange.status = resp.status_code
        stream = cast("HTTPSocketPoolResponse", resp.stream)  # what a geventhttpclient pool's connection answers with
        if self.stream:
            use_send_time(stream, exchange)
        remaining = max(self.timeout - (time.perf_counter() - exchange.start), 0.001)
        try:
            with deadline(exchange.start, remaining, exchange.cancel):
                self.check_status(resp)
                if self.stream:
                    with deadline_only(stream):
                        self.read_stream(stream, exchange)
                else:
                    self.read_json(json.loads(resp.content), exchange)
        except Exception as e:  # must not escape the block: Locust would drop the request from its stats
            exchange.fail(failure_name(e))
        exchange.finish()
        resp.request_meta["response_time"] = exchange.e2e * 1000
        resp.request_meta["response_length"] = exchange.completion_tokens or 0
        if exchange.error == CANCELLED:
            raise Cancelled()
        if exchange.error:
            resp.failure(exchange.error)
        else:
            resp.success()

    @staticmethod
    def check_status(resp: ResponseContextManager) -> None:
        if resp.status_code == 0:  # no response: Locust's FastHttpSession keeps the exception, raised here
            resp.raise_for_status()
        if resp.status_code != 200:
            raise response_error(resp.status_code, resp.content or b"")

    def read_stream(self, stream: HTTPSocketPoolResponse, exchange: Exchange) -> None:
        """Read an OpenAI-style SSE body to its end, timing each output-bearing chunk (``stream.py``)."""
        read_body(stream, SSEParser(exchange, self.output_marker, self.is_output), exchange)

    def encode(self, spec: RequestSpec, exchange: Exchange) -> tuple[bytes, str]:
        """The request's body and its Content-Type: ``body`` as JSON (an audio user's is a multipart form)."""
        return json.dumps(self.body(spec) | model_field(exchange.adapter)).encode(), "application/json"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        raise NotImplementedError

    def is_output(self, choice: dict[str, Any]) -> bool:
        raise NotImplementedError

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        if "error" in response:
            raise error_event(response)
        exchange.usage(response.get("usage") or {})
        choice = (response.get("choices") or [{}])[0]
        exchange.finish_reason = choice.get("finish_reason") or ""
        exchange.keep_text((choice.get("message") or {}).get("content") if "message" in choice else choice.get("text"))
