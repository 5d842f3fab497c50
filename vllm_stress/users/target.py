"""The server under test as one process sees it, made ready at test start (``StopTarget``: why a run cannot start)."""

from __future__ import annotations

import argparse
import logging
import os
import re
import time
from typing import TYPE_CHECKING

import gevent
import gevent.event
import requests
from locust import FastHttpUser, User
from locust.runners import MasterRunner, WorkerRunner

from vllm_stress.client import options as opts
from vllm_stress.client.canary import Canaries, load_canaries
from vllm_stress.client.cancel import Cancellations, cancellations_for
from vllm_stress.client.checks import StopTarget, check_model, validate
from vllm_stress.client.classes import ClassSet, declared
from vllm_stress.client.hitrate import DEFAULT_BLOCK_SIZE
from vllm_stress.client.pacing import OpenLoopArrivals, arrivals_for
from vllm_stress.client.prompts import Tokenizer, Workload, build_workload
from vllm_stress.client.recorder import Recorder, WorkerRecorder
from vllm_stress.client.sourceaddr import SOURCES
from vllm_stress.client.stream import KERNEL_CLOCK, receive_clock
from vllm_stress.client.structured import SchemaPool, load_pool
from vllm_stress.client.trace import TraceArrivals, arrivals_for_trace, read_trace
from vllm_stress.core import fleet, served
from vllm_stress.core.classes import TrafficClass
from vllm_stress.core.questions import DatasetError
from vllm_stress.core.schema import POOLED
from vllm_stress.master.cachereset import CacheReset
from vllm_stress.master.clienthealth import ClientHealth, report_worker_cpu
from vllm_stress.master.kneeprofile import KneeProfile
from vllm_stress.master.promexport import PromExport
from vllm_stress.master.replicaset import ReplicaSet
from vllm_stress.master.runrecorder import LocalRecorder, MasterRecorder
from vllm_stress.master.schedulestart import MasterStart, WorkerStart, scheduled
from vllm_stress.master.servermetrics import ServerMetrics
from vllm_stress.webui.liverun import LiveRun
from vllm_stress.webui.progress import RampProgress

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.master.spanreceiver import SpanReceiver

log = logging.getLogger(__name__)

TARGETS: dict[Environment, Target] = {}  # each process's, made at Locust's init


class Target:
    """The server under test as this process sees it: model, headers, the recorder of the process's role; the
    workloads and arrival clock where users run; the live run (``live``) on the master or local runner."""

    def __init__(self, environment: Environment) -> None:
        TARGETS[environment] = self
        self.environment = environment
        runner = environment.runner
        self.runs_users = not isinstance(runner, MasterRunner)
        self.is_worker = isinstance(runner, WorkerRunner)
        self.model = ""
        self.headers: dict[str, str] = {}
        self.recorder: Recorder
        self.live: LiveRun | None = None  # the master's or local runner's, for its web UI
        self.spans: SpanReceiver | None = None  # the master's or local runner's, with --otlp-port
        self.worker_start: WorkerStart | None = None  # a worker's: the master starts its schedule
        if isinstance(runner, WorkerRunner):
            self.recorder = WorkerRecorder(environment, runner.client_id)
            report_worker_cpu(environment)  # the master writes it into client_health.csv
            self.worker_start = WorkerStart(runner)
        else:
            recorder = (
                MasterRecorder(environment, self)
                if isinstance(runner, MasterRunner)
                else LocalRecorder(environment, self)
            )
            self.recorder = recorder
            if isinstance(runner, MasterRunner):
                MasterStart(environment, runner, recorder.run)
            KneeProfile(environment, recorder.run, self)
            CacheReset(environment, recorder.run, self)
            health = ClientHealth(environment, recorder)
            ReplicaSet(environment, recorder, self)
            self.live = LiveRun(
                recorder,
                ServerMetrics(environment, recorder, self),
                health,
                RampProgress(environment),
                PromExport(environment, recorder, health),
            )
            if self.options.otlp_port:  # after ServerMetrics: its stop listener runs once the server has settled
                # imported on first use (docs/contributing.md, "Imports")
                from vllm_stress.master.spanreceiver import SpanReceiver

                self.spans = SpanReceiver(environment, recorder, self.options.otlp_port)
        self.workloads: dict[bool, Workload] = {}  # chat template or not -> its workload
        self.prepared = gevent.event.Event()  # set when prepare() is over (successful or not): users wait for it
        self.arrivals: OpenLoopArrivals | TraceArrivals | None = None  # open loop: the arrival clock
        self.canaries: Canaries | None = None  # --canary-share: which requests are fixed prompts
        self.classes: ClassSet | None = None  # --traffic-class: each user's class and its workload
        self.schemas: SchemaPool | None = None  # --json-schema: which requests ask for a structured output
        self.cancellations: Cancellations | None = None  # --cancel-share: which requests the client cuts, and where

    @property
    def options(self) -> argparse.Namespace:
        options = self.environment.parsed_options
        assert options is not None  # Locust parses its command line before init
        return options

    @property
    def host(self) -> str:
        """The server the test-start probes go to: --host's first replica when it names several."""
        host = self.environment.host
        assert host is not None  # the test starts only with a host
        return fleet.replica_urls(host)[0]

    def prepare(self) -> None:
        """At test start: check the options, resolve the model and headers (the master or local runner checks them
        against the server), size the prompts and make the arrival clock. Raises StopTarget."""
        options = self.options
        self.arrivals = None
        validate(options)
        starts = {getattr(cls, "arrival_starts", "request") for cls in self.environment.user_classes}
        if options.trace and starts != {"request"}:
            raise StopTarget(
                "--trace sends each line as a request; a session's turns follow its answers: replay recorded "
                "sessions with --session-trace"
            )
        if (options.arrival_rate or options.microburst) and None in starts:
            raise StopTarget(
                "--arrival-rate and --microburst start requests or sessions on a schedule; an agent's steps follow "
                "its answers and tool latencies: run the agent user as a closed loop"
            )
        senders = class_senders(self.environment.user_classes, declared(options))
        if options.images and not all(getattr(cls, "takes_images", False) for cls in senders):
            raise StopTarget("--images: only the chat users (chat.py, sdk.py) send images")
        if options.videos and not all(getattr(cls, "takes_videos", False) for cls in senders):
            raise StopTarget("--videos: only the chat user (chat.py) sends videos")
        classes = self.environment.user_classes
        if options.session_trace and not all(getattr(cls, "replays_sessions", False) for cls in classes):
            raise StopTarget("--session-trace: only the session user (locustfiles/session.py) replays sessions")
        try:
            key = opts.api_key(options)
        except OSError as e:
            raise StopTarget(f"--api-key-file: {e}") from None
        self.use_source_addresses(options.source_addresses)
        if options.connections != POOLED and not self.own_connections():
            raise StopTarget(f"--connections {options.connections}: the SDK user's connections are its SDK's (pooled)")
        self.headers = {"Accept-Encoding": "identity"} | ({"Authorization": f"Bearer {key}"} if key else {})
        needs_model = any(getattr(cls, "needs_model", True) for cls in self.environment.user_classes)
        models = self.served_models(required=not options.model) if needs_model else {}
        self.model = options.model or (next(iter(models)) if needs_model else "")
        if not self.is_worker:
            check_model(options, self.model, models, self.host)
        if options.prefix_hit_rate is not None and options.kv_block_size is None:
            options.kv_block_size = self.server_block_size()
        self.workloads.clear()
        try:
            self.canaries = load_canaries(options.canary_file, options.canary_share, options.canary_min)
        except DatasetError as e:
            raise StopTarget(f"--canary-file: {e}") from None
        try:
            self.schemas = load_pool(options, seed=os.getpid())
        except ValueError as e:
            raise StopTarget(f"--json-schema: {e}") from None
        worker_index = getattr(self.environment.runner, "worker_index", 0)
        seed = os.getpid() if options.arrival_seed is None else options.arrival_seed + worker_index
        self.cancellations = cancellations_for(options, f"cancel-{seed}")  # its options passed validate
        if self.runs_users:
            for chat in {getattr(cls, "chat", False) for cls in senders}:
                self.workloads[chat] = self.build_workload(chat)
            for cls in self.environment.user_classes:  # what a user class sizes before the run (the session's turns)
                if prepare_workload := getattr(cls, "prepare_workload", None):
                    prepare_workload(self, self.workloads[getattr(cls, "chat", False)])
            self.classes = self.class_set()
            if options.trace:  # once the prompts are ready: no backlog
                self.arrivals = arrivals_for_trace(options, read_trace(options.trace), worker_index)
            else:
                self.arrivals = arrivals_for(options, seed, worker_index)
            if self.arrivals and not self.is_worker:  # a local run's schedule starts now; a worker's when told
                self.arrivals.start_at(time.perf_counter())

    def class_set(self) -> ClassSet | None:
        """The traffic classes of this process's users, their workloads made from the run's (None: no class)."""
        options = self.options
        if not (declared_classes := declared(options)):
            return None
        workers = max(getattr(options, "expect_workers", 1) or 1, 1) if self.is_worker else 1
        class_set = ClassSet(declared_classes, getattr(self.environment.runner, "worker_index", 0), workers)
        verify = not options.insecure
        class_set.prepare(
            self.workloads, options, lambda chat: Tokenizer(self.host, self.model, self.headers, chat, verify)
        )
        return class_set

    def use_source_addresses(self, text: str) -> None:
        """Where this process's connections leave from (--source-addresses); StopTarget for an address it cannot
        use, or a target they would not apply to."""
        if not text or not self.runs_users:
            return
        if receive_clock(self.environment.host or "") != KERNEL_CLOCK or not self.own_connections():
            raise StopTarget(
                "--source-addresses applies to an http:// target and the users whose connections are the suite's "
                "own (not the SDK user's)"
            )
        try:
            SOURCES.use(text)
        except ValueError as e:
            raise StopTarget(f"--source-addresses: {e}") from None

    def own_connections(self) -> bool:
        """Whether every user class's connections are the suite's own (Locust's FastHttpUser: not the SDK user's)."""
        return all(issubclass(cls, FastHttpUser) for cls in self.environment.user_classes)

    def served_models(self, required: bool) -> dict[str, int | None]:
        """{model: max_model_len or None} from ``/v1/models``. A server that cannot be reached is refused; one that
        does not list models only when the list is ``required`` (no --model given)."""
        host = self.host
        verify = not self.options.insecure
        try:
            models = served.models(host, self.headers, timeout=30, verify=verify, session=SOURCES.http_session())
        except (requests.HTTPError, ValueError) as e:
            if required:
                raise StopTarget(f"cannot list models at {host.rstrip('/')}/v1/models: {e}") from None
            return {}
        except requests.RequestException as e:
            raise StopTarget(
                f"cannot reach the server: GET {host.rstrip('/')}/v1/models: {connection_problem(e)}"
            ) from None
        if not models and required:
            raise StopTarget(f"cannot list models at {host.rstrip('/')}/v1/models: no model listed")
        return models

    def server_block_size(self) -> int:
        """The server's KV block size (its vllm:cache_config_info), what --prefix-hit-rate shares whole when
        --kv-block-size is not given; vLLM's GPU default when the server exports none."""
        size = served.kv_block_size(self.host, self.headers, timeout=30, verify=not self.options.insecure)
        if size is None:
            log.warning(
                "The server exports no vllm:cache_config_info: KV blocks of %d tokens assumed (--kv-block-size)",
                DEFAULT_BLOCK_SIZE,
            )
            return DEFAULT_BLOCK_SIZE
        log.info("KV blocks of %d tokens, the server's (vllm:cache_config_info)", size)
        return size

    def build_workload(self, chat: bool) -> Workload:
        """The prompts for chat (template counted) or plain prompts, sized once per process and run."""
        options = self.options
        tokenizer = Tokenizer(self.host, self.model, self.headers, chat, verify=not options.insecure)
        workload = build_workload(tokenizer, options, seed=os.getpid() ^ int(time.time()))
        log.info("Prompts sized for %s with %d /tokenize calls", self.model, tokenizer.calls)
        return workload


def class_senders(user_classes: list[type[User]], traffic_classes: list[TrafficClass]) -> set[type]:
    """The user classes that send the run's requests: Locust's, and the users of the other APIs its traffic classes
    name (api=: the chat user hands their requests over, vllm_stress.users.base); StopTarget for a class naming an
    API that a user class sends neither itself nor through another."""
    senders: set[type] = set(user_classes)
    for traffic_class in traffic_classes:
        for user_class in user_classes:
            api_user = getattr(user_class, "api_user", None)  # an HTTP user's (LLMUser); the SDK user has none
            sender = api_user(traffic_class.api) if api_user else (None if traffic_class.api else user_class)
            if sender is None:
                raise StopTarget(
                    f"--traffic-class {traffic_class.name}: {user_class.__name__} cannot send api={traffic_class.api} "
                    "(a mixed fleet runs locustfiles/chat.py: docs/guides/traffic-classes.md)"
                )
            senders.add(sender)
    return senders


def connection_problem(exc: Exception) -> str:
    """The root cause of a failed connection in a few words, from a requests exception."""
    text = str(exc)
    if tls := re.search(r"\[SSL: \w+\] ([^(]+)", text):
        return f"TLS error: {tls[1].strip()} (a self-signed test server needs --insecure)"
    if errno := re.search(r"\[Errno -?\d+\] ([^'\")]+)", text):
        return errno[1].strip()
    return f"{type(exc).__name__}: {text}"


def prepare_target(environment: Environment) -> None:
    llm_target = TARGETS[environment]
    llm_target.prepared.clear()
    try:
        llm_target.prepare()
    except StopTarget as e:
        log.error("%s", e)
        environment.process_exit_code = 2
        runner = environment.runner
        if runner is not None and not llm_target.is_worker:  # a worker's users stop; its master quits ...
            headless = environment.parsed_options is None or environment.parsed_options.headless
            gevent.spawn(runner.quit if headless else runner.stop)  # ... or keeps its web UI
    finally:
        llm_target.prepared.set()
        if llm_target.worker_start and scheduled(llm_target.options):  # ready, or failed: the master need not wait
            llm_target.worker_start.ready(llm_target.arrivals)
