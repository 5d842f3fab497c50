"""The suite's command-line options, registered as Locust custom arguments."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from vllm_stress.client import adapters
from vllm_stress.client.affinity import PRESETS
from vllm_stress.client.canary import DEFAULT_CANARY_MIN, DEFAULT_CANARY_SHARE
from vllm_stress.client.images import DEFAULT_IMAGE_POOL, DEFAULT_IMAGE_SIZE, IMAGE_FORMATS

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser

DEFAULT_INPUT_TOKENS = 2048
DEFAULT_OUTPUT_TOKENS = 512
DEFAULT_REQUEST_TIMEOUT_S = 600.0
# why 5 s (a scrape costs the server CPU): docs/concepts/load-generator.md, "The server's metrics"
DEFAULT_SERVER_METRICS_INTERVAL_S = 5.0
TOKEN_DISTRIBUTIONS = ("fixed", "uniform", "normal")
DEFAULT_TURNS = 4
DEFAULT_TURN_TOKENS = 128
DEFAULT_THINK_TIME_S = 1.0
DEFAULT_NUM_PROMPTS = 1000  # as vllm bench serve's --num-prompts: what a worker sizes with /tokenize at its start
THINK_DISTRIBUTIONS = ("constant", "exponential", "uniform")
DEFAULT_SESSION_HEADER = "X-Session-Id"


def add_arguments(parser: LocustArgumentParser) -> None:
    """Register the suite's options on Locust's argument parser."""
    parser.add_argument(
        "--model", default="", help="Model name sent in requests (default: the first model the server lists)"
    )
    adapters.add_arguments(parser)
    parser.add_argument(
        "--input-tokens",
        type=int,
        default=DEFAULT_INPUT_TOKENS,
        help="Prompt length in tokens, chat template included, measured with the server's /tokenize",
    )
    parser.add_argument(
        "--output-tokens",
        type=int,
        default=DEFAULT_OUTPUT_TOKENS,
        help="Output length in tokens (max_tokens, forced with ignore_eos and min_tokens)",
    )
    parser.add_argument(
        "--token-dist",
        choices=TOKEN_DISTRIBUTIONS,
        default="fixed",
        help="Distribution of input and output lengths around their targets",
    )
    parser.add_argument(
        "--token-spread",
        type=float,
        default=0.0,
        help="uniform: +/- this fraction of the target; normal: the standard deviation as a fraction",
    )
    parser.add_argument(
        "--prefix-tokens",
        type=int,
        default=0,
        help="Tokens at the start of every prompt shared by the prompts of its group (prefix caching "
        "on purpose; 0: every prompt random)",
    )
    parser.add_argument(
        "--prefix-groups",
        type=int,
        default=1,
        help="Different shared prefixes, each request draws one (with --prefix-tokens)",
    )
    parser.add_argument(
        "--dataset",
        default="",
        help='JSONL file of prompts ({"prompt": ...} or {"messages": ...}), or a ShareGPT JSON/JSONL file',
    )
    parser.add_argument(
        "--num-prompts",
        type=int,
        default=DEFAULT_NUM_PROMPTS,
        help="With --dataset: prompts drawn from the file (seeded: the same on every worker), each "
        "sized with the server's /tokenize when a worker starts (0: all of them)",
    )
    # not in the web UI: Locust puts a form field's value in the page, even a masked (is_secret) one
    parser.add_argument(
        "--api-key",
        default="",
        include_in_web_ui=False,
        env_var="OPENAI_API_KEY",
        help="Bearer token for the server (or OPENAI_API_KEY); never written to any output",
    )
    parser.add_argument("--api-key-file", default="", help="Read the bearer token from this file")
    parser.add_argument(
        "--no-stream",
        action="store_true",
        default=False,
        help="Send non-streaming requests (no TTFT/ITL; e2e and token counts only)",
    )
    parser.add_argument(
        "--no-ignore-eos",
        action="store_true",
        default=False,
        help="Let the model stop early: do not send ignore_eos/min_tokens",
    )
    parser.add_argument(
        "--temperature", type=float, default=None, help="Sampling temperature (server default if unset)"
    )
    parser.add_argument(
        "--canary-share",
        type=float,
        default=DEFAULT_CANARY_SHARE,
        help="Correctness canaries: this share of each level's requests are fixed prompts of a graded set "
        "at temperature 0 with a seed, their answers kept in answers.csv and compared across levels (0: none)",
    )
    parser.add_argument(
        "--canary-min",
        type=int,
        default=DEFAULT_CANARY_MIN,
        help="With --canary-share: at least this many canaries per level (and load-generating process); the set's "
        "first N questions are the prompts asked, in turn",
    )
    parser.add_argument(
        "--canary-file",
        default="",
        help="With --canary-share: a JSONL file of MMLU- or GSM8K-shaped questions "
        "(default: the shipped scenarios/data/synthetic-mc.jsonl)",
    )
    parser.add_argument(
        "--canaries-in-figures",
        action="store_true",
        default=False,
        help="Count the canaries in the live figures like any request (their Locust entry is the request's own, "
        "not '<name> canary'); run.json says so, and the analysis then counts them in every figure too",
    )
    parser.add_argument(
        "--json-schema",
        default="",
        help="Chat and completions users: a JSON schema file, or a folder of *.json schemas taken in turn, each "
        "answer must follow (docs/guides/structured-outputs.md)",
    )
    parser.add_argument(
        "--json-schema-share",
        type=float,
        default=1.0,
        help="With --json-schema: share of requests that carry a schema (the rest: unconstrained)",
    )
    parser.add_argument(
        "--json-schema-new-share",
        type=float,
        default=0.0,
        help="With --json-schema: share of those schemas made new (a property renamed): compiled afresh",
    )
    parser.add_argument(
        "--thinking",
        choices=("on", "off"),
        default="on",
        help="Chat requests to a reasoning model: off sends chat_template_kwargs enable_thinking=false (Qwen3's "
        "switch) and thinking=false (DeepSeek-V3.1+'s and Kimi-K2's): no reasoning; on leaves the template's default",
    )
    parser.add_argument(
        "--reasoning-budget",
        type=int,
        default=0,
        help="Chat requests to a reasoning model: the thinking tokens each request may decode besides --output-tokens, "
        "which then bounds the answer (max_tokens = output + budget: with ignore_eos a model that thinks at most the "
        "budget answers with at least --output-tokens). 0: --output-tokens bounds every decode token, thinking "
        "included, as vLLM's max_tokens does",
    )
    parser.add_argument(
        "--reasoning-effort",
        choices=("low", "medium", "high"),
        default=None,
        help="Chat requests: send reasoning_effort (vLLM's chat API field, read by chat templates that have one, such "
        "as gpt-oss's; other models ignore it). Unset: not sent",
    )
    parser.add_argument(
        "--images",
        type=int,
        default=0,
        help="Chat requests to a vision-language model: this many synthetic images with each prompt (image_url "
        "data URLs after the text); the tokens they add are measured on the server at test start (0: text only)",
    )
    parser.add_argument(
        "--image-size", default=DEFAULT_IMAGE_SIZE, help="With --images: WIDTHxHEIGHT of every image, in pixels"
    )
    parser.add_argument(
        "--image-format", choices=tuple(IMAGE_FORMATS), default="jpeg", help="With --images: how the images are encoded"
    )
    parser.add_argument(
        "--image-pool",
        type=int,
        default=DEFAULT_IMAGE_POOL,
        help="With --images: distinct images each worker makes before the run (seeded noise) and draws from",
    )
    parser.add_argument(
        "--no-traceparent",
        action="store_true",
        default=False,
        help="Do not send a W3C traceparent header (by default each request's trace id is derived from its "
        "X-Request-Id, so a server's OpenTelemetry span of it joins its row: --otlp-port)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="Seconds one request may take in total, and may stay silent, before it fails as Timeout",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=False,
        help="Do not verify the target's TLS certificate (self-signed test servers)",
    )
    parser.add_argument(
        "--server-metrics-interval",
        type=float,
        default=DEFAULT_SERVER_METRICS_INTERVAL_S,
        help="Seconds between scrapes of the server's Prometheus /metrics into server_metrics.csv (0: no scraping)",
    )
    parser.add_argument(
        "--server-metrics-url",
        action="append",
        default=[],
        include_in_web_ui=False,
        help="Master or local runner: a replica's Prometheus /metrics behind the router --host names, scraped into "
        "server_metrics.csv instead of the target's (repeatable: one per replica; the analysis sums them); ROLE=URL: a P/D "
        "role, prefill, decode or both",
    )
    parser.add_argument(
        "--server-metrics-service",
        default="",
        include_in_web_ui=False,
        help="Master or local runner: a Kubernetes headless Service's /metrics URL (http://NAME.NAMESPACE.svc:8000"
        "/metrics): each pod address its name resolves to at test start is scraped as with --server-metrics-url",
    )
    parser.add_argument(
        "--gpu-metrics-url",
        action="append",
        default=[],
        include_in_web_ui=False,
        help="Master or local runner: a GPU exporter's Prometheus /metrics (NVIDIA's DCGM exporter, AMD's "
        "device-metrics-exporter) to scrape into gpu_metrics.csv with the server's (repeatable: one per host)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        include_in_web_ui=False,
        help="Master or local runner: serve the load generator's own Prometheus series at /metrics on this port "
        "(on --web-host's interface, no login; the web UI serves them at /metrics too) (0: not on a port of its own)",
    )
    parser.add_argument(
        "--otlp-port",
        type=int,
        default=0,
        include_in_web_ui=False,
        help="Master or local runner: receive the server's OpenTelemetry request spans over OTLP/HTTP (protobuf, "
        "POST /v1/traces) on this port into server_spans.csv, joined to the rows by trace id; start vLLM with "
        "--otlp-traces-endpoint http://THIS_HOST:PORT/v1/traces and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf "
        "(0: no receiver)",
    )
    parser.add_argument(
        "--arrival-rate",
        type=float,
        default=0.0,
        help="Open loop: send requests at this total rate (req/s, Poisson arrivals, split over "
        "--expect-workers workers); the users are only the pool that carries them (0: closed loop)",
    )
    parser.add_argument(
        "--trace",
        default="",
        help="Replay a trace: Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids) or "
        "Azure LLM inference CSV (TIMESTAMP, ContextTokens, GeneratedTokens); the users carry its lines",
    )
    parser.add_argument("--speedup", type=float, default=1.0, help="With --trace: divide the trace's gaps by this")
    parser.add_argument("--trace-start", type=float, default=0.0, help="With --trace: seconds of the trace to skip")
    parser.add_argument(
        "--trace-duration", type=float, default=0.0, help="With --trace: seconds of the trace to replay (0: to its end)"
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=DEFAULT_TURNS,
        help="Session user: turns of one conversation (a ShareGPT conversation: at most its human turns)",
    )
    parser.add_argument(
        "--turn-tokens",
        type=int,
        default=DEFAULT_TURN_TOKENS,
        help="Session user: new user-message tokens of each turn after the first (the first is "
        "--input-tokens, template included)",
    )
    parser.add_argument(
        "--think-time",
        type=float,
        default=DEFAULT_THINK_TIME_S,
        help="Session user: mean seconds between an answer and the next turn",
    )
    parser.add_argument(
        "--think-dist",
        choices=THINK_DISTRIBUTIONS,
        default="exponential",
        help="Session user: think time distribution (uniform: between 0 and twice the mean)",
    )
    parser.add_argument(
        "--agent-task",
        default="",
        help="Agent user: the task script (JSON: docs/guides/agents.md); '' : the built-in one",
    )
    parser.add_argument(
        "--session-header",
        default=DEFAULT_SESSION_HEADER,
        help="Session user: header carrying the session id, for routers that pin sessions; with --prefix-tokens "
        "every user: the prompt's prefix group ('' : none)",
    )
    parser.add_argument(
        "--router-preset",
        choices=("", *PRESETS),
        default="",
        help="Pin sessions (and prefix groups) the way this router reads them, instead of --session-header: "
        "production-stack x-user-id, llm-d its llm-d-session cookie sent back, dynamo x-dynamo-session-id, "
        "sglang X-SMG-Routing-Key (docs/guides/fleets.md)",
    )
    parser.add_argument(
        "--replica-spread",
        choices=("request", "user"),
        default="request",
        help="With -H naming several replicas, comma-separated (http://a:8000,http://b:8000; no router): round "
        "robin per request, or each user on one replica (sticky); test-start probes go to the first",
    )
    parser.add_argument(
        "--session-seed",
        type=int,
        default=None,
        help="Session user: seed of the think times and prompt words (default: a new one per run, so "
        "that a rerun does not find the previous run's conversations in the prefix cache)",
    )
    parser.add_argument(
        "--results-dir",
        default="",
        help="Folder for requests.csv and the run files "
        "(default: results/run-<time>); the master refuses a folder that already holds a run",
    )
    parser.add_argument(
        "--server-launch",
        default="",
        include_in_web_ui=False,
        help="Set by python -m scenarios: how it started the server (JSON), kept in run.json",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        default=False,
        include_in_web_ui=False,
        help="Allow --results-dir to hold an earlier run (its files are replaced)",
    )
    parser.add_argument(
        "--traffic-class",
        action="append",
        default=[],
        include_in_web_ui=False,  # the form has no field for a repeated option
        help="A traffic class, NAME:weight=W,input=N,output=N,priority=P,model=M,slo=SLO (repeatable, or several "
        "separated by ';'): its share of the users, lengths, vLLM priority, model or adapter and SLO "
        "(docs/guides/traffic-classes.md)",
    )
    parser.add_argument(
        "--source-addresses",
        default="",
        help="Comma-separated local IPv4 addresses the connections to an http:// target leave from, in turn: each "
        "adds an ephemeral port range (about 28,000 connections per server) (default: the kernel picks one)",
    )


def api_key(options: argparse.Namespace) -> str:
    """The bearer token from --api-key-file, --api-key or OPENAI_API_KEY (in that order), or ''. Surrounding
    whitespace is dropped: a file or a Kubernetes Secret made with --from-file usually ends in a newline."""
    if options.api_key_file:
        with open(options.api_key_file, encoding="utf-8") as f:
            return f.read().strip()
    return (options.api_key or os.environ.get("OPENAI_API_KEY", "")).strip()
