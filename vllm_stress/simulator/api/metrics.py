"""``/metrics``: vLLM V1's Prometheus metrics with their names, types, labels and buckets, observed once per engine
step (docs/concepts/simulator.md, section 11)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from vllm_stress.core.histogram import Histogram

from ..engine.core import Engine, StepResult
from ..engine.sequence import Sequence

TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
ITL_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
REQUEST_LATENCY_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
ITERATION_TOKENS_BUCKETS: list[float] = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
PARAMS_N_BUCKETS: list[float] = [1, 2, 5, 10, 20]
PREEMPTIONS_BUCKETS: list[float] = [1, 2, 3, 4, 5, 10, 20]
# vLLM's KV_CACHE_RESIDENCY_BUCKETS (vllm/v1/metrics/buckets.py): from millisecond reuse gaps to half-hour lifetimes
KV_CACHE_RESIDENCY_BUCKETS: list[float] = [
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    20,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
]
SAMPLED = "Sampled metrics (controlled by --kv-cache-metrics-sample)."
FINISHED_REASONS = ("stop", "length", "abort")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")  # vllm/v1/metrics/cache_hit_source.py
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
# Families of features the simulator does not have (multimodal cache, FLOP estimates): always 0.
ZERO_COUNTERS = {
    "vllm:mm_cache_queries": "Multi-modal cache queries, in terms of number of queried items.",
    "vllm:mm_cache_hits": "Multi-modal cache hits, in terms of number of cached items.",
    "vllm:estimated_flops_per_gpu": "Estimated number of floating point operations per GPU.",
    "vllm:estimated_read_bytes_per_gpu": "Estimated number of bytes read from memory per GPU.",
    "vllm:estimated_write_bytes_per_gpu": "Estimated number of bytes written to memory per GPU.",
}


def one_two_five_buckets(maximum: int) -> list[float]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``maximum`` (le="1.0" ..., as prometheus_client
    prints them)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > maximum:
                return buckets
            buckets.append(value)
        exponent += 1


class NamedHistogram(Histogram):
    """A histogram with its vLLM series name and help, exposed as one family."""

    def __init__(self, name: str, documentation: str, buckets: list[float]) -> None:
        super().__init__(buckets)
        self.name = name
        self.documentation = documentation

    def family(
        self, labels: list[str], labelnames: tuple[str, ...] = ("model_name", "engine")
    ) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(labelnames))
        family.add_metric(labels, self.buckets(floatToGoString), self.sum)
        return family


class EngineMetrics:
    """Collector for one engine; ``observe_step`` after each step. A client's abort is in no finished-request statistic,
    as in vLLM 0.32 (the ``abort`` series stays at 0)."""

    def __init__(self, engine: Engine, model_name: str, cache_info: dict[str, str]) -> None:
        self.engine = engine
        self.labels = [model_name, "0"]
        self.cache_info = cache_info
        self.prompt_tokens = 0
        self.cached_prompt_tokens = 0
        self.external_prompt_tokens = 0  # of the cached ones, those a KV connector supplied (CPU tier, P/D)
        self.generation_tokens = 0
        self.finished = Counter({reason: 0 for reason in FINISHED_REASONS})
        lengths = one_two_five_buckets(engine.max_model_len)
        self.ttft = NamedHistogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = NamedHistogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS
        )
        self.request_tpot = NamedHistogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        self.e2e = self._latency("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.")
        self.queue = self._latency(
            "request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."
        )
        self.prefill = self._latency(
            "request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."
        )
        self.decode = self._latency(
            "request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."
        )
        self.inference = self._latency(
            "request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."
        )
        self.request_prompt = NamedHistogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", lengths
        )
        self.request_generation = NamedHistogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", lengths
        )
        self.request_max_tokens = NamedHistogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", lengths
        )
        self.iteration_tokens = NamedHistogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_TOKENS_BUCKETS
        )
        self.request_max_generation = NamedHistogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            lengths,
        )
        self.request_kv_computed = NamedHistogram(
            "vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill.", lengths
        )
        self.request_n = NamedHistogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS
        )
        self.request_preemptions = NamedHistogram(
            "vllm:request_num_preemptions", "Number of preemptions per request.", PREEMPTIONS_BUCKETS
        )
        self.histograms = [
            self.ttft,
            self.itl,
            self.request_tpot,
            self.e2e,
            self.queue,
            self.prefill,
            self.decode,
            self.inference,
            self.request_prompt,
            self.request_generation,
            self.request_max_tokens,
            self.iteration_tokens,
            self.request_max_generation,
            self.request_kv_computed,
            self.request_n,
            self.request_preemptions,
        ]
        self.residency = engine.kv.residency  # --kv-cache-metrics: the residency histograms, else none
        if self.residency is not None:
            self.block_lifetime = NamedHistogram(
                "vllm:kv_block_lifetime_seconds",
                f"Histogram of KV cache block lifetime from allocation to eviction. {SAMPLED}",
                KV_CACHE_RESIDENCY_BUCKETS,
            )
            self.block_idle = NamedHistogram(
                "vllm:kv_block_idle_before_evict_seconds",
                f"Histogram of idle time before KV cache block eviction. {SAMPLED}",
                KV_CACHE_RESIDENCY_BUCKETS,
            )
            self.block_reuse_gap = NamedHistogram(
                "vllm:kv_block_reuse_gap_seconds",
                "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent accesses "
                f"are recorded (ring buffer). {SAMPLED}",
                KV_CACHE_RESIDENCY_BUCKETS,
            )
            self.histograms += [self.block_lifetime, self.block_idle, self.block_reuse_gap]

    @staticmethod
    def _latency(name: str, documentation: str) -> NamedHistogram:
        return NamedHistogram(f"vllm:{name}", documentation, REQUEST_LATENCY_BUCKETS)

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry()
        registry.register(self)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        return registry

    def observe_step(self, result: StepResult) -> None:
        self.iteration_tokens.observe(self.engine.last_num_scheduled_tokens)
        if self.engine.lora:
            self.engine.lora.record_info()
        self.generation_tokens += self.engine.last_num_output_tokens
        gaps: Counter[float] = Counter()
        for seq in result.outputs:
            if seq.previous_token is None:
                self.ttft.observe(seq.ttft())
                self.prompt_tokens += seq.prompt_len
                self.cached_prompt_tokens += seq.num_cached_tokens
                self.external_prompt_tokens += seq.num_external_tokens
            else:
                gaps[seq.last_gap()] += 1
            if seq.finish_reason in ("stop", "length"):
                self.observe_finished(seq)
        for gap, count in gaps.items():
            self.itl.observe(gap, count)
        if self.residency is not None:  # the step's evictions of followed blocks, as vLLM's logger observes them
            for eviction in self.residency.drain():
                self.block_lifetime.observe(eviction.lifetime)
                self.block_idle.observe(eviction.idle)
                for gap in eviction.reuse_gaps:
                    self.block_reuse_gap.observe(gap)

    def observe_finished(self, seq: Sequence) -> None:
        self.finished[seq.finished_reason()] += 1
        self.e2e.observe(seq.e2e())
        self.request_prompt.observe(seq.prompt_len)
        self.request_generation.observe(seq.num_output)
        self.request_max_tokens.observe(seq.max_tokens)
        self.request_max_generation.observe(seq.num_output)  # per sequence: each choice counts on its own
        self.request_kv_computed.observe(seq.prompt_len - seq.num_cached_tokens)
        self.request_preemptions.observe(seq.num_preemptions)
        if seq.first_scheduled is not None:
            self.queue.observe(seq.queue_time())
        if seq.first_token is not None:
            self.prefill.observe(seq.prefill_time())
            self.decode.observe(seq.decode_time())
            self.inference.observe(seq.inference_time())
        if seq.num_output > 1:
            self.request_tpot.observe(seq.tpot())

    def _gauge(self, name: str, documentation: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=["model_name", "engine"])
        family.add_metric(self.labels, value)
        return family

    def _counter(self, name: str, documentation: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, documentation, labels=["model_name", "engine"])
        family.add_metric(self.labels, value)
        return family

    def _by_label(
        self,
        family_type: type[CounterMetricFamily] | type[GaugeMetricFamily],
        name: str,
        documentation: str,
        label: str,
        values: Mapping[str, float],
    ) -> CounterMetricFamily | GaugeMetricFamily:
        family = family_type(name, documentation, labels=["model_name", "engine", label])
        for key, value in values.items():
            family.add_metric([*self.labels, key], value)
        return family

    def _prefix_cache(self) -> Iterator[Metric]:
        """The GPU's prefix cache and the CPU tier's (vLLM's connector prefix-cache stats), and the prompt tokens by
        where they came from (vLLM's PromptTokenStats: a connector's tokens are external_kv_transfer)."""
        engine, cached, external = self.engine, self.cached_prompt_tokens, self.external_prompt_tokens
        yield self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            engine.prefix_cache_queries,
        )
        yield self._counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            engine.prefix_cache_hits,
        )
        yield self._counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries, in terms of number of queried tokens.",
            engine.external_prefix_cache_queries,
        )
        yield self._counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits, in terms of number of cached tokens.",
            engine.external_prefix_cache_hits,
        )
        yield self._by_label(
            CounterMetricFamily,
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            dict.fromkeys(PROMPT_SOURCES, 0)
            | {
                "local_compute": self.prompt_tokens - cached,
                "local_cache_hit": cached - external,
                "external_kv_transfer": external,
            },
        )
        yield self._counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", cached)
        yield self._by_label(
            CounterMetricFamily,
            "vllm:prompt_tokens_cached_by_source",
            "Number of cached prompt tokens by source.",
            "source",
            dict.fromkeys(CACHE_HIT_SOURCES, 0)
            | {"device": engine.prefix_cache_hits, "host": engine.external_prefix_cache_hits},
        )

    def _offload_transfers(self) -> Iterator[Metric]:
        """vLLM's OffloadingConnector transfer counters (OffloadPromMetrics), only with a CPU tier."""
        transfers = self.engine.offload_transfers()
        if not transfers:
            return
        names = {
            "vllm:kv_offload_total_bytes": ("Number of bytes offloaded by KV connector", 0),
            "vllm:kv_offload_total_time": ("Total time measured by all KV offloading operations", 1),
        }
        for name, (documentation, index) in names.items():
            values = {kind: totals[index] for kind, totals in transfers.items()}
            yield self._by_label(CounterMetricFamily, name, documentation, "transfer_type", values)

    def _unsimulated_features(self) -> Iterator[Metric]:
        for name, documentation in ZERO_COUNTERS.items():
            yield self._counter(name, documentation, 0)
        yield self._by_label(
            GaugeMetricFamily,
            "vllm:engine_sleep_state",
            "Engine sleep state.",
            "sleep_state",
            {state: float(state == "awake") for state in SLEEP_STATES},
        )
        rejections = CounterMetricFamily(
            "vllm:admission_rejections", "Requests rejected by admission control.", labels=["model_name", "reason"]
        )
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            rejections.add_metric([self.labels[0], reason], 0)
        yield rejections

    def collect(self) -> Iterator[Metric]:
        engine = self.engine
        deferred = len(engine.lora.deferred) if engine.lora else 0  # skipped for want of a LoRA slot
        yield self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", len(engine.running)
        )
        yield self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", len(engine.waiting)
        )
        yield self._by_label(
            GaugeMetricFamily,
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting, by the reason they wait.",
            "reason",
            {"capacity": len(engine.waiting) - deferred, "deferred": deferred},
        )
        if engine.lora:
            yield engine.lora.info_family()
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engine.kv.usage)
        yield self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", engine.num_preemptions
        )
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens)
        yield self._counter("vllm:generation_tokens", "Number of generation tokens processed.", self.generation_tokens)
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["model_name", "engine", "finished_reason"],
        )
        for reason, count in self.finished.items():
            success.add_metric([*self.labels, reason], count)
        yield success
        for histogram in self.histograms:
            yield histogram.family(self.labels)
        info = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=[*self.cache_info, "engine"]
        )
        info.add_metric([*self.cache_info.values(), "0"], 1.0)
        yield info
        yield from self._prefix_cache()
        yield from self._offload_transfers()
        yield from self._unsimulated_features()
        if engine.spec:
            yield from engine.spec.families(self.labels)
