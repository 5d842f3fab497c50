"""The run folder's format versions: the number every run writes into run.json (and the analysis into summary.json
and the results store), and what each released format lacked, so a reader knows every earlier one
(docs/concepts/formats.md). Each format has its fixture in tests/fixtures/formats/v<N>/."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_stress.core.schema import (
    ANSWER_COLUMNS,
    ANSWERS_FILE,
    CLIENT_HEALTH_FILE,
    CONNECTOR_COUNTERS,
    ENGINE_STEP_COUNTERS,
    EXTERNAL_PREFIX_COUNTERS,
    FORMAT_KEY,
    GPU_METRICS_COLUMNS,
    GPU_METRICS_FILE,
    KV_RESIDENCY_COLUMNS,
    KV_TRANSFER_COLUMNS,
    PREFILL_COLUMNS,
    REPLICA_COLUMNS,
    REPLICAS_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    SERVER_LORA_COLUMNS,
    SERVER_METRICS_FILE,
    SERVER_SOURCE_COUNTERS,
    SERVER_SPAN_COLUMNS,
    SERVER_SPANS_FILE,
    SPEC_DECODE_COUNTERS,
    TASK_COLUMNS,
    TASKS_FILE,
)


@dataclass(frozen=True)
class Addition:
    """Columns (or run.json keys) a format added to a file, and what the analysis computes from them: a run of an
    earlier format reads them as empty and its report says "no <feeds>" (nothing when ``feeds`` is empty)."""

    file: str
    names: tuple[str, ...]
    feeds: str = ""


@dataclass(frozen=True)
class Format:
    """A released format: its number, the date of the first release that wrote it and what it added."""

    version: int
    released: str
    added: tuple[Addition, ...] = ()


FORMATS = (
    Format(1, "2026-11-22"),
    Format(
        2,
        "2026-11-23",
        (
            Addition(REQUESTS_FILE, ("schedule_lag_s",), "schedule lag"),
            Addition(REQUESTS_FILE, ("cached_tokens",), "client-side prefix-cache hit rate"),
            Addition(REQUESTS_FILE, ("request_id", "session_id", "turn")),
            Addition(RUN_FILE, ("server_requests", "unaccounted_requests"), "server-side request count"),
            Addition(RUN_FILE, ("receive_clock", "server_version", "server_launch")),
            Addition(
                SERVER_METRICS_FILE, ("prefix_cache_queries", "prefix_cache_hits"), "server prefix-cache hit rate"
            ),
            Addition(SERVER_METRICS_FILE, ("frontend_cpu_s",), "server frontend CPU"),
            Addition(SERVER_METRICS_FILE, ("http_count", "http_sum_s", "http_p50_s", "http_p99_s"), "server HTTP time"),
            Addition(CLIENT_HEALTH_FILE, ("loop_lag_ms",), "client event-loop lag"),
        ),
    ),
    Format(
        3,
        "2026-11-25",
        (
            Addition(RUN_FILE, (FORMAT_KEY,)),
            Addition(RUN_FILE, ("server_cache_config",), "KV-cache ceiling"),
            Addition(GPU_METRICS_FILE, tuple(GPU_METRICS_COLUMNS), "GPU power and energy"),
            Addition(REQUESTS_FILE, ("ttfa_s", "reasoning_tokens"), "time to first answer token, reasoning share"),
            Addition(SERVER_METRICS_FILE, ("replica",)),
        ),
    ),
    Format(
        4,
        "2026-11-25",
        (
            Addition(REQUESTS_FILE, ("replica",)),
            Addition(REQUESTS_FILE, ("images", "image_tokens", "image_bytes"), "image tokens and bytes per request"),
            Addition(SERVER_SPANS_FILE, tuple(SERVER_SPAN_COLUMNS), "per-request server spans"),
            Addition(RUN_FILE, ("span_receiver",)),
            Addition(CLIENT_HEALTH_FILE, ("read_behind_p99_ms",), "client read-behind time"),
            Addition(RUN_FILE, ("server_twin",)),
            Addition(RUN_FILE, ("schedule_start",)),
            Addition(REQUESTS_FILE, ("canary",)),
            Addition(ANSWERS_FILE, tuple(ANSWER_COLUMNS)),
            Addition(SERVER_METRICS_FILE, KV_TRANSFER_COLUMNS),
            Addition(RUN_FILE, ("replica_roles",)),
            Addition(REPLICAS_FILE, tuple(REPLICA_COLUMNS), "replica set over time"),
            Addition(REQUESTS_FILE, ("adapter",), "per-adapter latency and throughput"),
            Addition(SERVER_METRICS_FILE, tuple(SERVER_LORA_COLUMNS), "LoRA slots and deferred requests"),
            Addition(SERVER_METRICS_FILE, SPEC_DECODE_COUNTERS, "server spec-decode acceptance"),
            Addition(REQUESTS_FILE, ("class",), "per-class report"),
            Addition(RUN_FILE, ("traffic_classes",)),
            Addition(REQUESTS_FILE, ("schema_id", "schema_first_use", "answer_valid"), "structured-output validity"),
            Addition(REQUESTS_FILE, ("task_id", "step")),
            Addition(TASKS_FILE, tuple(TASK_COLUMNS)),
        ),
    ),
    Format(
        5,
        "2026-11-28",
        (
            Addition(ANSWERS_FILE, ("model",), "per-model canary comparison"),
            Addition(RUN_FILE, ("canaries_in_figures",)),
            Addition(REQUESTS_FILE, ("shared_prefix_tokens",), "prefix-cache hit rate against its target"),
            Addition(REQUESTS_FILE, ("endpoint",)),
            Addition(REQUESTS_FILE, ("cancel_after",), "client cancellations"),
            Addition(RUN_FILE, ("stress",)),
            Addition(RUN_FILE, ("stopped",)),
            Addition(REQUESTS_FILE, ("inputs",), "embeddings and rerank inputs per second"),
            Addition(REQUESTS_FILE, ("trace_blocks", "trace_reused_blocks", "session_turns"), "recorded sessions"),
            Addition(REQUESTS_FILE, ("connect_s",), "connection churn"),
            Addition(RUN_FILE, ("connections",)),
            Addition(SERVER_METRICS_FILE, EXTERNAL_PREFIX_COUNTERS, "hit rate by KV tier"),
            Addition(SERVER_METRICS_FILE, ("resident_memory",), "server memory drift"),
            Addition(CLIENT_HEALTH_FILE, ("rss_mib",), "client memory drift"),
            Addition(RUN_FILE, ("shape",)),
            Addition(REQUESTS_FILE, ("burst",), "microbursts"),
            Addition(RUN_FILE, ("profile",)),
            Addition(SERVER_METRICS_FILE, PREFILL_COLUMNS, "the server's prefill time of long contexts"),
            Addition(RUN_FILE, ("prefix_cache_resets",)),
            Addition(SERVER_METRICS_FILE, ENGINE_STEP_COUNTERS, "engine steps"),
            Addition(SERVER_METRICS_FILE, CONNECTOR_COUNTERS, "the KV connector's own hit rate"),
            Addition(RUN_FILE, ("working_set",), "working-set sweep"),
            Addition(REQUESTS_FILE, ("videos", "video_tokens", "video_bytes"), "video tokens and bytes per request"),
            Addition(REQUESTS_FILE, ("audio_s",), "audio seconds per second"),
            Addition(SERVER_METRICS_FILE, tuple(SERVER_SOURCE_COUNTERS), "prompt tokens by source and tier"),
            Addition(SERVER_METRICS_FILE, KV_RESIDENCY_COLUMNS, "KV block lifetimes"),
        ),
    ),
)
FORMAT_VERSION = FORMATS[-1].version


class FormatError(ValueError):
    """A format this suite cannot read: the message is one line naming both versions."""


def format_of(version: object) -> Format:
    """The released format ``version``; FormatError for one newer than this suite, or for what is not a format."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FormatError(f"format {version!r} is not a vllm-stress format (1 to {FORMAT_VERSION})")
    if version > FORMAT_VERSION:
        raise FormatError(
            f"format {version} is newer than this vllm-stress reads (formats 1 to {FORMAT_VERSION}): update vllm-stress"
        )
    return FORMATS[version - 1]


def added_after(version: int, file: str) -> set[str]:
    """The columns (or keys) of ``file`` that a run of format ``version`` lacks: those added by later formats."""
    later = FORMATS[format_of(version).version :]
    return {name for format in later for addition in format.added if addition.file == file for name in addition.names}


def not_computed(version: int) -> list[str]:
    """What the analysis cannot compute for a run of format ``version``, a line per later format: "no schedule lag,
    client event-loop lag: written before 2026-11-23" ..."""
    lines = []
    for later in FORMATS[format_of(version).version :]:
        feeds = [addition.feeds for addition in later.added if addition.feeds]
        if feeds:
            lines.append(f"no {', '.join(feeds)}: written before {later.released}")
    return lines


def added_in(file: str, name: str) -> Format:
    """The format that added the column (or run.json key) ``name`` to ``file``."""
    return next(f for f in FORMATS for addition in f.added if addition.file == file and name in addition.names)
