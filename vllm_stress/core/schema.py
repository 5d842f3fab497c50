"""The run folder's schema: the CSV columns and run.json keys that carry a run from the load generator to the
analysis, and the metric definitions behind them (docs/concepts/metrics.md). Imports nothing of Locust."""

from __future__ import annotations

REQUESTS_FILE = "requests.csv"
LEVELS_FILE = "levels.csv"
ITL_FILE = "itl_histogram.csv"
ANSWERS_FILE = "answers.csv"
RUN_FILE = "run.json"
# A report folder (python -m analysis RUN --out OUT)
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
SUMMARY_JSON = "summary.json"
LOCUST_CSV_PREFIX = "locust"  # Locust's own --csv files in a run folder: locust_stats.csv, locust_failures.csv ...

# requests.csv: one row per request started, written by the master (or the local runner) as rows arrive.
REQUEST_COLUMNS = [
    "start_time",  # unix seconds when the request was sent
    "end_time",  # unix seconds when it ended (last output chunk, end of body, or the failure)
    "ttft_s",  # time to first token; empty when there was no output or no streaming
    "tpot_s",  # time per output token after the first; empty without ttft_s or when completion_tokens <= 1
    "e2e_s",  # end-to-end latency
    "chunks",  # output-bearing SSE chunks received (chunks != tokens with stream_interval > 1)
    "prompt_tokens",  # from the server's usage (empty when the server sent none)
    "completion_tokens",  # from the server's usage (empty when the server sent none)
    "target_prompt_tokens",  # what the request was built to have
    "target_completion_tokens",  # what the request asked for (max_tokens)
    "count_mismatch",  # 1 when a successful request's usage count differs from its target (the output's only
    # checked under ignore_eos, so not for canaries or --json-schema requests); 0 otherwise
    "ok",  # 1 success; 0 failure, or aborted or cancelled (error Aborted, Cancelled: neither a success nor a failure)
    "error",  # failure class, e.g. "HTTP 503", "StreamTruncated", "Timeout", or Aborted, Cancelled; empty on success
    "status",  # HTTP status code (0 when no response arrived)
    "finish_reason",  # the first choice's (a stream's last one sent): length, stop, abort ...; empty when none came
    "users",  # target user count (the level) when the request started
    "worker",  # the Locust worker that ran the request (its client id, hostname_<32 hex digits>), "local" without
    # workers
    "name",  # the user class's request name: chat, completions, generate, sdk-chat, chat-session, agent; a session's
    # primer (--session-primer) is session-primer, kept out of every figure
    "schedule_lag_s",  # open loop (--arrival-rate, --trace): from the request's scheduled arrival to its send (no free
    # user, or a late wake-up); empty in a closed loop and on a session's later turns (its first took the arrival)
    "cached_tokens",  # prompt tokens the server found in its prefix cache (usage.prompt_tokens_details; vLLM sends
    # it with --enable-prompt-tokens-details), empty when it did not say
    "request_id",  # the X-Request-Id header the request carried (vLLM's request id; the simulator's --request-log key)
    "session_id",  # multi-turn sessions (locustfiles/session.py): the conversation the request belongs to, else empty
    "turn",  # its turn in the conversation, from 1 to at most --turns; empty outside sessions
    "ttfa_s",  # time to first answer token: to the first output chunk that is not a reasoning model's thinking
    # (delta.reasoning or delta.reasoning_content); equals ttft_s without reasoning, empty when no answer came
    "reasoning_tokens",  # output tokens that were thinking: usage.completion_tokens_details.reasoning_tokens when the
    # server sends it, else the reasoning chunks counted (exact with stream_interval 1); empty when neither says any.
    # A row with reasoning_tokens > 0 and no ttfa_s reasoned and never answered (e.g. cut by max_tokens)
    "replica",  # with -H naming several replicas (client-side spreading): the host:port the request went to, else ""
    "images",  # images sent with the prompt (--images), 0 for a text-only prompt
    "image_tokens",  # the prompt tokens those images add (in target_prompt_tokens): measured once at test start, a
    # one-token generation with them less the text's /tokenize count (vLLM's /tokenize counts an image as one
    # placeholder, not the tokens its processor expands it to)
    "image_bytes",  # bytes of the images' data URLs in the request body (base64, what went on the wire)
    "videos",  # videos sent with the prompt (--videos: video_url parts of JPEG frames), 0 for none
    "video_tokens",  # the prompt tokens those videos add (in target_prompt_tokens): measured once at test start as
    # image_tokens are (a one-token generation with them less the text's /tokenize count)
    "video_bytes",  # bytes of the videos' data URLs in the request body (base64 frames, what went on the wire)
    "canary",  # a correctness canary (--canary-share): the fixed prompt's id, its answer in answers.csv; else ""
    "adapter",  # the model drawn for the request (--lora-adapters), else "" (the run's model; canaries too)
    "class",  # the traffic class of the user that sent it (--traffic-class, vllm_stress.core.classes), else ""
    "schema_id",  # --json-schema: the schema the answer had to follow (its file's name; a new one's with a suffix)
    "schema_first_use",  # 1: this process sent that schema first with this request, 0: it had before
    "answer_valid",  # valid, cut (not valid, finish_reason length) or invalid; empty without a schema or on failure
    "task_id",  # the agent task (tasks.csv) the request is a step of, else empty
    "step",  # its step in the task, from 1 (a fan-out's requests share one)
    "shared_prefix_tokens",  # --prefix-hit-rate: its leading prompt tokens built to be found in the prefix cache
    # (whole KV blocks of its group's prefix, the chat template's included), else empty
    "endpoint",  # the API path the request went to: /v1/chat/completions, /v1/completions, /v1/responses,
    # /v1/messages, /generate
    "cancel_after",  # --cancel-share: the cancellation drawn for the request (e.g. 2s, 20tokens), else ""; its row
    # says Cancelled when the client cut it there, a success when it ended first
    "inputs",  # a pooling request's inputs: the texts embedded (/v1/embeddings, --embedding-inputs) or the documents
    # scored against its query (/rerank, /score, --rerank-documents); empty for a generating request
    "trace_blocks",  # --trace, --session-trace: the trace's hash ids (KV blocks of --trace-block-size tokens) its
    # prompt was made of, else empty
    "trace_reused_blocks",  # --session-trace: of those, the blocks an earlier turn of its recorded session had (the
    # trace's own block reuse), else empty
    "session_turns",  # --session-trace: the turns its recorded session has (a session that ended with fewer, not by
    # a failure, was truncated by the run's stop), else empty
    "connect_s",  # seconds the connection this request opened took: TCP connect, and TLS handshake to an https://
    # target (the load generator's clock); empty when it went on a connection already open (--connections)
    "burst",  # --microburst: the burst the request was sent in, from 1 (the first, K s after the schedule's start),
    # else empty
    "audio_s",  # an audio user's request (locustfiles/audio.py, --audio-seconds): seconds of audio it sent, else empty
]
# The request columns that hold text (the others hold numbers, empty for none)
REQUEST_TEXT_COLUMNS = frozenset(
    {"error", "finish_reason", "worker", "name", "request_id", "session_id", "replica", "canary", "adapter", "class"}
    | {"schema_id", "answer_valid", "task_id", "endpoint", "cancel_after"}
)

# answers.csv: one row per canary request (--canary-share), its answer text, written beside requests.csv. A canary
# is a fixed prompt sent at temperature 0 with a seed, so the same prompt's answers can be compared across levels.
ANSWER_COLUMNS = [
    "request_id",  # the requests.csv row this answer belongs to
    "users",  # the level when the request started
    "worker",  # worker id, as in requests.csv
    "canary",  # the fixed prompt's id (the graded set's question id)
    "model",  # the model it asked (the run's, or its traffic class's with canaries=model); answers are compared per model
    "ok",  # 1 when the request succeeded (a failed or aborted one keeps what it streamed)
    "gold",  # the set's expected answer (a letter or a number), "" when the prompt has none
    "answer",  # the answer's text (content, not thinking), cut at ANSWER_MAX_CHARS
]
ANSWER_MAX_CHARS = 4000  # bounds answers.csv: at most this many characters of each answer are kept

# The error class of a request whose stream was cut because the run (or, with --cooldown, its level) stopped the
# users: the client ended it, not the server or the network. Such a row is kept (its tokens were streamed) but it is
# neither a success nor a failure: it is counted apart as aborted, everywhere.
ABORTED = "Aborted"
# The error class of a request the client cancelled on purpose (--cancel-share, --cancel-after): a population of its
# own, like aborted ones, neither a success nor a failure and in no latency figure.
CANCELLED = "Cancelled"
# The request name (requests.csv's name, Locust's stats entry) of a session's primer (--session-primer): before a user
# joins a recorded session mid-way (--session-start), the prompt of the last turn it skips, max_tokens 1, so that the
# session's history is in the prefix cache. A row of the run's accounting (the server counts it), in no figure.
SESSION_PRIMER = "session-primer"
# run.json's connections (--connections): how long a user's connections live (vllm_stress.client.pools)
POOLED = "pooled"  # a user keeps its connections for its lifetime (Locust's FastHttpUser)
PER_REQUEST = "per-request"  # a connection per request, closed after it
PER_SESSION = "per-session"  # a session user's conversation or an agent's task keeps one; others: as pooled
CONNECTION_MODES = (POOLED, PER_REQUEST, PER_SESSION)

# tasks.csv: one row per agent task (docs/guides/agents.md), written beside requests.csv.
TASKS_FILE = "tasks.csv"
TASK_COLUMNS = [
    "task_id",  # the task's id, as on its requests' rows
    "users",  # the level when it started
    "worker",  # worker id, as in requests.csv
    "start_time",  # unix seconds: its first request was sent
    "end_time",  # unix seconds: its last answer or tool ended, it failed, or the stop cut it
    "latency_s",  # end_time - start_time
    "turns",  # model turns begun, the failed or cut one included (a fan-out is one)
    "requests",  # requests sent, a failed or cut one included (each has its requests.csv row)
    "tool_calls",  # tool calls run (a tool the stop cut included)
    "step_time_s",  # seconds in its steps, each from its first send to its last answer's last byte
    "tool_time_s",  # seconds running tools (as slept); latency_s less both is the client's own work
    "tool_call_s",  # seconds from its start to each tool call (its answer whole), ";"-separated
    "finished",  # 1 when it ran to its end without a failure, else 0 (failed, or cut)
    "failed_step",  # the step that failed, else empty (a cut task has none)
    "error",  # why: a request's failure class, NoToolCall, UnknownTool, ToolCallInvalidJSON, ToolCallCut ...; Aborted
    # when the run's stop cut the task (neither finished nor failed: counted apart)
]
SIDE_FILES = {ANSWERS_FILE: ANSWER_COLUMNS, TASKS_FILE: TASK_COLUMNS}  # written beside requests.csv when rows come

# levels.csv: one row per concurrency level of a step ramp, written by the load shape on the master.
LEVEL_COLUMNS = [
    "users",  # target user count of the level
    "ramp_start",  # unix seconds when the shape asked for this level
    "hold_start",  # unix seconds when its hold began, after the ramp and warm-up (the measured window starts here)
    "hold_end",  # unix seconds when the hold ended: a fixed hold's end, or the end of the window an auto hold was
    # judged over (up to which every process had reported); a level never held has a zero-length hold
]

# itl_histogram.csv: inter-token gaps per level, summed over all workers.
ITL_COLUMNS = [
    "users",  # the level (target user count)
    "itl_ms",  # the gap between two output-bearing chunks of a stream, ms (rounded by latency_bucket_ms)
    "count",  # gaps of that length at that level
]

# run.json: what the run was, written by the master at test start and rewritten at the end.
FORMAT_KEY = "format_version"  # also in summary.json; the results store keeps it as SQLite's user_version
RUN_KEYS = [
    FORMAT_KEY,  # the run folder's format (vllm_stress.core.formats): what its files hold
    "scenario",  # scenario name, or "" for a plain locust run
    "target",  # base URL of the server under test
    "model",  # model name sent in the requests
    "user_class",  # Locust user class name
    "input_tokens",  # target prompt tokens
    "output_tokens",  # target completion tokens
    "started",  # unix seconds
    "ended",  # unix seconds, or null while running
    "complete",  # false when the run was interrupted (Ctrl-C, SIGTERM, lost master): analyse as partial
    "workers",  # worker ids seen during the run
    "lost_workers",  # [{"worker", "last_seen", "rows"}] for workers that went missing mid-run (rows received, late too)
    "server_requests",  # requests the server finished during the run (its request_success_total), or null
    "unaccounted_requests",  # of those, how many have no row: lost with a worker (a lower bound), or null
    "receive_clock",  # {worker id or "local": the clock its streaming users timed chunks with} (stream.py)
    "server_version",  # the server's GET /version at test start ("0.11.0"), or null when it has none
    "server_launch",  # {"kind": "simulator" | "server-cmd", "command": [...]} when the scenario runner started the
    # server (its command line with every flag), or null
    "server_cache_config",  # {"block_size", "num_gpu_blocks"}: the server's KV cache (vLLM's vllm:cache_config_info
    # gauge, read at test start), or null when it exports none
    "span_receiver",  # with --otlp-port: {"port", "spans" (received in the run), "rejected" (malformed OTLP bodies)},
    # else null
    "server_twin",  # {"source", "error"}: the server is the simulator calibrated as a twin (GET /version's "twin":
    # the runs its step time was fitted to, its error on them), or null for a measured server
    "schedule_start",  # --trace or --arrival-rate on workers: {"start" (unix seconds, sent by the master), "workers":
    # {id: {"clock_offset_ms" (the master's clock minus the worker's, NTP's estimate), "round_trip_ms" (it is within
    # half of it), "ahead_ms" (how long before the start the worker had it)}}, "skew_ms" (the spread of the offsets:
    # how far apart the workers' schedules may be)}, or null (vllm_stress.master.schedulestart)
    "replica_roles",  # with --server-metrics-url ROLE=URL: {host:port: role} (vllm_stress.core.roles)
    "traffic_classes",  # --traffic-class: [{"name", "weight", "input", "output", "dataset", "priority", "model",
    # "slo", "canaries"}] (vllm_stress.core.classes), or null
    "canaries_in_figures",  # --canaries-in-figures: true when the correctness canaries count in the live figures,
    # so the analysis counts them in every figure too; false (or absent, before format 5): kept apart
    "stress",  # {"arrival_rate" (arrivals/s: requests, sessions for the session user; null: closed loop),
    # "burstiness" (the gamma shape of its gaps: 1 Poisson),
    # "microburst" ({"requests", "within_ms", "every_s"}: --microburst, or null),
    # "cancel_share", "cancel_after"} (vllm_stress.client.features.stress), or null when none is set
    "stopped",  # {"after_users" (the last level that ran), "reason" ("errors 7.2 % > 5.0 %")}: a --stop-on rule ended
    # the step ramp after that level (vllm_stress.core.stopon), or null
    "profile",  # --profile-at / --profile-when-running: {"asked": {"at_users", "when_running", "seconds"}, "started"
    # and "stopped" (unix seconds: when the master POSTed /start_profile and /stop_profile), "start_status" and
    # "stop_status" (the server's HTTP status, null: no answer), "start_answer", "stop_answer" (its status line and
    # body, or the error)} (vllm_stress.master.kneeprofile), or null
    "connections",  # --connections: pooled (each user keeps its connections), per-request or per-session
    # (vllm_stress.client.pools); absent before format 5: pooled
    "shape",  # --shape as given ("steps", "soak:2,64" ...; vllm_stress.scenarios.shapes), or null when the run had no
    # load shape of the suite's
    "prefix_cache_resets",  # --reset-prefix-cache: per level, {"users", "time" (unix seconds of the POST), "reset"
    # (every replica said success), "replicas": {host:port: {"status" (null: no answer), "success", "answer"}}}
    # (vllm_stress.master.cachereset), or null
    "working_set",  # --shape working-set: its levels held, [{"contexts", "tokens" (contexts × --prefix-tokens),
    # "start", "end" (unix seconds of its hold)}] (vllm_stress.scenarios.shapes.sweep), or null
]


# server_metrics.csv: one row per scrape of the server's Prometheus /metrics (vLLM V1 names, summed over engines),
# written by the master (or the local runner) every --server-metrics-interval seconds. Empty when the server does not
# expose the metric. Histograms are the observations since the previous scrape: their count, sum and the p50/p99
# interpolated in the delta buckets the way PromQL's histogram_quantile does (server clock: no network, queue included).
SERVER_METRICS_FILE = "server_metrics.csv"
SERVER_GAUGES = {  # column -> scraped sample: the value at the scrape
    "running": "vllm:num_requests_running",  # requests in the engine's running batch
    "waiting": "vllm:num_requests_waiting",  # requests in its waiting queue
    "kv_cache_usage": "vllm:kv_cache_usage_perc",  # share of the KV cache blocks in use, 0..1
    "resident_memory": "process_resident_memory_bytes",  # resident memory of the scraped process (vLLM's API
    # server: prometheus_client's process collector), bytes
}
SERVER_COUNTERS = {  # column -> scraped sample: cumulative since the server started
    "preemptions": "vllm:num_preemptions_total",  # preemption events (a request's KV blocks freed, recomputed later)
    "prompt_tokens": "vllm:prompt_tokens_total",  # prompt tokens processed
    "generation_tokens": "vllm:generation_tokens_total",  # output tokens generated
    "request_success": "vllm:request_success_total",  # every finish reason (vLLM 0.32 counts no client abort)
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",  # prompt tokens looked up in the prefix cache
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",  # of which found there
    "external_prefix_cache_queries": "vllm:external_prefix_cache_queries_total",  # prompt tokens past the GPU's
    # hits looked up by a KV connector (a CPU offload tier, LMCache): only with one
    "external_prefix_cache_hits": "vllm:external_prefix_cache_hits_total",  # of which it held (loaded, not recomputed)
    "frontend_cpu_s": "process_cpu_seconds_total",  # CPU of vLLM's API server process (HTTP, templating, detokenizing)
    "kv_transfer_bytes": "vllm:nixl_bytes_transferred_sum",  # KV bytes a P/D decode instance pulled
    "spec_drafts": "vllm:spec_decode_num_drafts_total",  # speculative decoding (only when on): drafts verified
    "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",  # their draft tokens
    "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",  # of those, the accepted ones
    "engine_steps": "vllm:iteration_tokens_total_count",  # engine steps (vLLM's histogram of tokens per step)
    "step_tokens": "vllm:iteration_tokens_total_sum",  # the tokens those steps scheduled: prompt chunks and decodes
    "connector_lookup_tokens": "lmcache:num_lookup_tokens_total",  # a KV connector's own count (LMCache's, in vLLM's
    # /metrics or from --connector-metrics-url): prompt tokens it was asked to look up, whole prompts
    "connector_lookup_hits": "lmcache:num_lookup_hits_total",  # of which it held, from each prompt's start
    "connector_stored_tokens": "lmcache:num_stored_tokens_total",  # tokens it stored (offloaded to its tiers)
}
SERVER_SOURCE_COUNTERS = {  # column -> (scraped counter, its source label): cumulative, one label value each
    "prompt_tokens_computed": ("vllm:prompt_tokens_by_source_total", "local_compute"),  # prompt tokens prefilled
    # (computed on the GPU)
    "prompt_tokens_local_hit": ("vllm:prompt_tokens_by_source_total", "local_cache_hit"),  # prompt tokens its own
    # prefix cache held
    "prompt_tokens_external": ("vllm:prompt_tokens_by_source_total", "external_kv_transfer"),  # prompt tokens a KV
    # connector loaded (a CPU offload tier, LMCache, another instance)
    "cached_tokens_device": ("vllm:prompt_tokens_cached_by_source_total", "device"),  # cached prompt tokens by the
    # tier that held them: the accelerator's memory
    "cached_tokens_host": ("vllm:prompt_tokens_cached_by_source_total", "host"),  # offloaded to host memory (DRAM)
    "cached_tokens_disk": ("vllm:prompt_tokens_cached_by_source_total", "disk"),  # on disk
    "cached_tokens_p2p": ("vllm:prompt_tokens_cached_by_source_total", "p2p"),  # sent by another vLLM instance
    "cached_tokens_unspecified": ("vllm:prompt_tokens_cached_by_source_total", "external_unspecified"),  # from a
    # connector that does not say its tier
}
ENGINE_STEP_COUNTERS = ("engine_steps", "step_tokens")
SPEC_DECODE_COUNTERS = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")
EXTERNAL_PREFIX_COUNTERS = ("external_prefix_cache_queries", "external_prefix_cache_hits")
CONNECTOR_COUNTERS = ("connector_lookup_tokens", "connector_lookup_hits", "connector_stored_tokens")
# samples a vLLM server exports only with a feature on: their absence is no warning
SERVER_HISTOGRAMS = {  # column prefix -> histogram: {prefix}_count, {prefix}_sum_s, {prefix}_p50_s, {prefix}_p99_s
    "ttft": "vllm:time_to_first_token_seconds",  # the server's time to first token
    "e2e": "vllm:e2e_request_latency_seconds",  # the server's end-to-end latency (arrival in its engine to finish)
    "queue": "vllm:request_queue_time_seconds",  # time in the engine's waiting queue
    "prefill": "vllm:request_prefill_time_seconds",  # time in prefill: first scheduled to first token (every chunk
    # of a chunked prefill, and the decode steps of others it shared them with)
    "http": "http_request_duration_highr_seconds",  # vLLM's HTTP layer (prometheus_fastapi_instrumentator): from the
    # request reaching its handler to the last byte of the response written, so it holds the frontend's own time
    # (templating, tokenization, detokenization, SSE)
    "kv_transfer": "vllm:nixl_xfer_time_seconds",  # its KV transfers (vLLM's NixlConnector)
    "kv_block_lifetime": "vllm:kv_block_lifetime_seconds",  # a sampled KV block's time from allocation to eviction
    # (vLLM with --kv-cache-metrics, which samples --kv-cache-metrics-sample of the blocks)
    "kv_block_idle": "vllm:kv_block_idle_before_evict_seconds",  # its time from its last use to its eviction
    "kv_block_reuse_gap": "vllm:kv_block_reuse_gap_seconds",  # the time between two uses of one block (its last
    # four uses kept)
}
KV_RESIDENCY_HISTOGRAMS = ("kv_block_lifetime", "kv_block_idle", "kv_block_reuse_gap")
KV_CONNECTOR_SAMPLES = {"vllm:nixl_bytes_transferred_sum", "vllm:nixl_xfer_time_seconds"}  # only a P/D decode has them
# samples only some servers export (speculative decoding on, a P/D decode instance): not warned about when absent
SERVER_OPTIONAL = {
    SERVER_COUNTERS[column] for column in SPEC_DECODE_COUNTERS + EXTERNAL_PREFIX_COUNTERS + CONNECTOR_COUNTERS
} | KV_CONNECTOR_SAMPLES
SERVER_OPTIONAL |= {SERVER_GAUGES["resident_memory"]}  # only where the process collector runs (Linux)
SERVER_OPTIONAL |= {sample for sample, _ in SERVER_SOURCE_COUNTERS.values()}  # not in vLLMs older than these
SERVER_OPTIONAL |= {SERVER_HISTOGRAMS[prefix] for prefix in KV_RESIDENCY_HISTOGRAMS}  # only with --kv-cache-metrics
SERVER_QUANTILES = {"p50": 0.5, "p99": 0.99}


def histogram_columns(prefix: str) -> tuple[str, ...]:
    """The server_metrics.csv columns of the histogram ``prefix`` (a key of SERVER_HISTOGRAMS)."""
    return tuple(f"{prefix}_{part}" for part in ("count", "sum_s", *(f"{quantile}_s" for quantile in SERVER_QUANTILES)))


KV_TRANSFER_COLUMNS = ("kv_transfer_bytes", *histogram_columns("kv_transfer"))
PREFILL_COLUMNS = histogram_columns("prefill")
KV_RESIDENCY_COLUMNS = tuple(column for prefix in KV_RESIDENCY_HISTOGRAMS for column in histogram_columns(prefix))
SERVER_LORA_COLUMNS = [  # vLLM's LoRA gauges (vllm_stress.master.lorascrape), empty when the server has no LoRA
    "max_lora",  # vllm:lora_requests_info's max_lora label: adapter slots per batch (--max-loras)
    "lora_running",  # adapters its running_lora_adapters label names (in its newest sample)
    "lora_waiting",  # adapters its waiting_lora_adapters names; vLLM fills both with every adapter in flight
    "waiting_deferred",  # vllm:num_requests_waiting_by_reason{reason="deferred"}: waiting requests its scheduler
    # skipped (e.g. no LoRA slot)
]
SERVER_METRICS_COLUMNS = [
    "time",  # unix seconds of the scrape
    "users",  # the level (target user count) at the scrape
    "replica",  # the --server-metrics-url's host:port scraped (a replica behind a router), "" for the target itself
    # (one row per replica at each scrape, all with the scrape's time; the analysis sums them into the fleet's)
    *SERVER_GAUGES,
    *SERVER_COUNTERS,
    *SERVER_SOURCE_COUNTERS,
    *(column for prefix in SERVER_HISTOGRAMS for column in histogram_columns(prefix)),
    *SERVER_LORA_COLUMNS,
]

# replicas.csv: the replica set over time (vllm_stress.master.replicaset): at each scrape, a row per replica
# listed or ever resolved.
REPLICAS_FILE = "replicas.csv"
REPLICA_COLUMNS = [
    "time",  # unix seconds
    "replica",  # host:port, as in server_metrics.csv
    "up",  # 1: its /metrics answered; 0: not, or it left the Service's DNS
    "running",  # vllm:num_requests_running (empty when down)
    "waiting",  # vllm:num_requests_waiting (empty when down)
]

# server_spans.csv: one row per request span the server exported during the run (vLLM's OpenTelemetry "llm_request"
# span, vllm_stress.core.spans), received over OTLP/HTTP by the master (or the local runner) with --otlp-port. The
# analysis joins a span to the requests.csv row whose request_id maps to its trace id; spans of other clients stay
# unjoined (counted). Seconds as vLLM measured them; a value the span lacks is empty.
SERVER_SPANS_FILE = "server_spans.csv"
SERVER_SPAN_ATTRIBUTES = {  # column -> the span attribute it holds (vLLM's vllm/tracing names)
    "queue_s": "gen_ai.latency.time_in_queue",  # waiting in vLLM's scheduler: queued to first scheduled
    "ttft_s": "gen_ai.latency.time_to_first_token",  # arrival in vLLM to its first token, as the engine saw it
    "prefill_s": "gen_ai.latency.time_in_model_prefill",  # first scheduled to first token
    "decode_s": "gen_ai.latency.time_in_model_decode",  # first token to last token
    "e2e_s": "gen_ai.latency.e2e",  # arrival in vLLM to finished
    "prompt_tokens": "gen_ai.usage.prompt_tokens",  # the prompt's tokens
    "completion_tokens": "gen_ai.usage.completion_tokens",  # the output's tokens
}
SERVER_SPAN_COLUMNS = [
    "received",  # unix seconds when the span reached the receiver
    "trace_id",  # 32 hex digits: the trace the request's traceparent started (vllm_stress.core.spans.trace_id_of)
    "request_id",  # the span's gen_ai.request.id (vLLM's request id)
    *SERVER_SPAN_ATTRIBUTES,
]

# gpu_metrics.csv: one row per GPU at each scrape of a --gpu-metrics-url (an NVIDIA DCGM exporter's or an AMD
# device-metrics-exporter's Prometheus /metrics), written by the master (or the local runner) beside server_metrics.csv
# every --server-metrics-interval seconds. A value the exporter does not export is empty.
GPU_METRICS_FILE = "gpu_metrics.csv"
GPU_SAMPLES = {  # column -> the samples it is read from, the first one a GPU has: NVIDIA's, then AMD's
    "power_w": ("DCGM_FI_DEV_POWER_USAGE", "gpu_package_power", "gpu_power_usage"),  # power drawn, watts
    "utilization_percent": ("DCGM_FI_DEV_GPU_UTIL", "gpu_gfx_activity"),  # share of the time it was busy, 0 to 100
    "memory_used_mib": ("DCGM_FI_DEV_FB_USED", "gpu_used_vram"),  # device memory in use, MiB (AMD says MB)
}
GPU_LABELS = ("gpu", "gpu_id")  # the label that names a GPU on its exporter: DCGM's, AMD's
GPU_METRICS_COLUMNS = [
    "time",  # unix seconds of the scrape
    "users",  # the level (target user count) at the scrape
    "source",  # the --gpu-metrics-url scraped
    "gpu",  # the GPU on that exporter (its gpu or gpu_id label)
    *GPU_SAMPLES,
]

# client_health.csv: the CPU of every load-generating process, so a saturated client is not taken for a saturated
# server. Written by the master (or the local runner): its own CPU every few seconds, and each worker's with every
# worker report (3 s). A row's figure is averaged since that process's previous row; above CLIENT_CPU_LIMIT_PERCENT
# Locust warns that the response times may be wrong.
CLIENT_HEALTH_FILE = "client_health.csv"
CLIENT_HEALTH_COLUMNS = [
    "time",  # unix seconds
    "users",  # the level at that time
    "worker",  # worker id as in requests.csv, "master", or "local" without workers
    "cpu_percent",  # CPU of that process (100 = one core)
    "loop_lag_ms",  # how late its event loop ran its timers since its previous row, on average (waiting for a core)
    "read_behind_p99_ms",  # p99 of its read-behind time since its previous row: from a chunk's kernel arrival time to
    # the moment its code read it (vllm_stress.client.readbehind); empty without kernel-timed reads
    "rss_mib",  # resident memory of that process at the row, MiB (a soak's client drift); empty when not told
]
CLIENT_CPU_LIMIT_PERCENT = 90  # locust.runners.CPU_WARNING_THRESHOLD
# A load generator whose event loop runs its timers this late on average takes every timestamp about as late: its
# latencies are not to be trusted (it waits for a core that something else holds, whatever its own CPU figure).
CLIENT_LOOP_LAG_LIMIT_MS = 20.0
# A load generator whose chunks are read this share of a request's e2e (p50) late, at p99, also sends its closed-loop
# users' next requests about as late: it offered the server up to this share less load (docs/concepts/timing.md).
CLIENT_READ_BEHIND_SHARE = 0.05


def latency_bucket_ms(seconds: float) -> float:
    """The histogram key of a latency (an inter-token gap, a live TTFT ...): 0.1 ms resolution below 100 ms, 1 ms
    below 1 s, 10 ms above, so a histogram stays small however many requests it counts."""
    ms = seconds * 1000.0
    if ms < 100.0:
        return round(ms, 1)
    if ms < 1000.0:
        return float(round(ms))
    return float(round(ms, -1))
