"""The simulator's HTTP surface against vLLM's wire format: the official openai client, raw SSE chunk shapes, errors,
/tokenize, the legacy /generate, /metrics. One simulator subprocess (cpu-tiny) serves the whole module."""

import http.client
import json
import urllib.parse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.harness import metric_samples
from vllm_stress.simulator.api.metrics import REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello, world! How are you?"}]
ROLE_CHUNK_KEYS = {"id", "object", "created", "model", "choices", "prompt_token_ids", "prompt_text"}
ROLE_CHOICE_KEYS = {"index", "delta", "logprobs", "finish_reason"}
CONTENT_CHUNK_KEYS = {"id", "object", "created", "model", "choices", "kv_transfer_params"}
CONTENT_CHOICE_KEYS = {"index", "delta", "logprobs", "finish_reason", "token_ids"}
FINAL_CHOICE_KEYS = CONTENT_CHOICE_KEYS | {"stop_reason", "weight_versions"}
COMPLETION_CHOICE_KEYS = {
    "index",
    "text",
    "logprobs",
    "finish_reason",
    "stop_reason",
    "prompt_token_ids",
    "token_ids",
    "weight_versions",
}
USAGE_CHUNK_KEYS = {"id", "object", "created", "model", "choices", "usage"}
USAGE_KEYS = {"prompt_tokens", "total_tokens", "completion_tokens"}


def request(url: str, method: str, path: str, body=None, headers=None) -> tuple[int, dict, bytes]:
    """One HTTP request to the simulator; returns status, lower-cased headers and the whole body."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    payload = json.dumps(body).encode() if isinstance(body, dict) else body
    connection.request(method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def post(url: str, path: str, body, headers=None) -> tuple[int, dict | bytes]:
    status, response_headers, data = request(url, "POST", path, body, headers)
    is_json = response_headers.get("content-type", "").startswith("application/json")
    return status, json.loads(data) if is_json else data


def sse_events(data: bytes) -> list:
    """Split an SSE body into decoded ``data:`` payloads; ``[DONE]`` stays a string."""
    assert data.endswith(b"\n\n")
    events = []
    for block in data[:-2].split(b"\n\n"):
        assert block.startswith(b"data: "), block
        payload = block[len(b"data: ") :]
        events.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return events


@pytest.fixture(scope="module")
def sim(module_simulator):
    return module_simulator("--profile", "cpu-tiny")


@pytest.fixture(scope="module")
def client(sim):
    import openai  # here, not at the top: each test process collects this file, and openai takes 0.4 CPU-s to import

    return openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0)


def test_openai_client_chat_and_completions(sim, client):
    assert sim.model == "vllm-stress/tiny" and sim.url.startswith("http://127.0.0.1:")
    chat = client.chat.completions.create(
        model=sim.model, messages=MESSAGES, max_tokens=8, extra_body={"ignore_eos": True}
    )
    assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 8
    assert len(chat.choices[0].message.content.split()) == 8
    chunks = list(
        client.chat.completions.create(
            model=sim.model,
            messages=MESSAGES,
            max_completion_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 6 and chunks[-1].usage.completion_tokens == 6 and chunks[-1].choices == []
    completion = client.completions.create(
        model=sim.model, prompt="Once upon a time", max_tokens=5, extra_body={"ignore_eos": True}
    )
    assert completion.usage.prompt_tokens == 5 and len(completion.choices[0].text.split()) == 5
    streamed = list(
        client.completions.create(model=sim.model, prompt="Once upon", stream=True, extra_body={"ignore_eos": True})
    )
    assert len(streamed) == 16 and streamed[-1].choices[0].finish_reason == "length"  # completions default: 16


def test_raw_chat_stream_chunk_order_and_key_sets(sim):
    body = {
        "model": sim.model,
        "messages": MESSAGES,
        "max_tokens": 5,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "some_unknown_field": {"x": 1},
    }
    status, headers, data = request(sim.url, "POST", CHAT, body)
    assert status == 200 and headers["content-type"] == "text/event-stream; charset=utf-8"
    events = sse_events(data)
    role, contents, usage, done = events[0], events[1:6], events[6], events[7:]
    assert done == ["[DONE]"] and len(events) == 8
    assert set(role) == ROLE_CHUNK_KEYS and set(role["choices"][0]) == ROLE_CHOICE_KEYS
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    for chunk in contents[:-1]:
        assert set(chunk) == CONTENT_CHUNK_KEYS and set(chunk["choices"][0]) == CONTENT_CHOICE_KEYS
        assert set(chunk["choices"][0]["delta"]) == {"content"} and chunk["choices"][0]["finish_reason"] is None
    final = contents[-1]["choices"][0]
    assert set(final) == FINAL_CHOICE_KEYS and final["finish_reason"] == "length" and final["stop_reason"] is None
    assert set(usage) == USAGE_CHUNK_KEYS and usage["choices"] == [] and set(usage["usage"]) == USAGE_KEYS
    assert usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 5
    assert len({(e["id"], e["created"], e["object"]) for e in events[:-1]}) == 1
    assert role["id"].startswith("chatcmpl-") and len(role["id"]) == len("chatcmpl-") + 32


def test_raw_completions_stream_chunk_order_and_key_sets(sim):
    body = {
        "prompt": "The capital of France is",
        "max_tokens": 4,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, _, data = request(sim.url, "POST", COMPLETIONS, body)
    assert status == 200
    events = sse_events(data)
    assert events[-1] == "[DONE]" and len(events) == 6
    for chunk in events[:4]:
        assert set(chunk) == CONTENT_CHUNK_KEYS and chunk["object"] == "text_completion"
        assert set(chunk["choices"][0]) == COMPLETION_CHOICE_KEYS
    assert [c["choices"][0]["finish_reason"] for c in events[:4]] == [None, None, None, "length"]
    assert events[4]["choices"] == [] and events[4]["usage"]["completion_tokens"] == 4
    assert events[0]["id"].startswith("cmpl-")


def test_stream_without_usage_has_no_usage_chunk_and_continuous_usage_counts_up(sim):
    plain = sse_events(
        request(sim.url, "POST", CHAT, {"messages": MESSAGES, "max_tokens": 3, "ignore_eos": True, "stream": True})[2]
    )
    assert len(plain) == 5 and all("usage" not in e for e in plain[:-1])
    body = {
        "messages": MESSAGES,
        "max_tokens": 3,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events = sse_events(request(sim.url, "POST", CHAT, body)[2])
    assert [e["usage"]["completion_tokens"] for e in events[:-1]] == [0, 1, 2, 3, 3]


def test_n_choices_and_stream_interval(sim):
    body = {"messages": MESSAGES, "max_tokens": 3, "ignore_eos": True, "n": 2, "stream": True}
    events = sse_events(request(sim.url, "POST", CHAT, body)[2])[:-1]
    for index in (0, 1):
        mine = [e["choices"][0] for e in events if e["choices"][0]["index"] == index]
        assert "role" in mine[0]["delta"] and len(mine) == 4 and mine[-1]["finish_reason"] == "length"
    body = {"prompt": "Hi", "max_tokens": 9, "ignore_eos": True, "stream": True, "stream_interval": 4}
    texts = [e["choices"][0]["text"] for e in sse_events(request(sim.url, "POST", COMPLETIONS, body)[2])[:-1]]
    assert [len(text.split()) for text in texts] == [1, 4, 4]


def test_ignore_eos_min_tokens_and_early_stop(sim):
    for extra in ({"ignore_eos": True}, {"min_tokens": 40}):
        status, body = post(sim.url, COMPLETIONS, {"prompt": "Count", "max_tokens": 40, **extra})
        assert status == 200 and body["usage"]["completion_tokens"] == 40
        assert body["choices"][0]["finish_reason"] == "length"
    reasons = set()
    for seed in range(8):
        status, body = post(sim.url, COMPLETIONS, {"prompt": "Tell me", "max_tokens": 2000, "seed": seed})
        reasons.add(body["choices"][0]["finish_reason"])
        assert body["usage"]["completion_tokens"] < 2000
        assert len(body["choices"][0]["text"].split()) == body["usage"]["completion_tokens"] - 1  # EOS has no text
    assert reasons == {"stop"}
    same = [post(sim.url, COMPLETIONS, {"prompt": "Tell me", "max_tokens": 2000, "seed": 7})[1] for _ in range(2)]
    assert same[0]["choices"][0]["text"] == same[1]["choices"][0]["text"]


def test_tokenize_counts_match_usage(sim):
    conversations = [
        MESSAGES,
        [{"role": "user", "content": "x"}],
        [
            {"role": "user", "content": [{"type": "text", "text": "Describe it, please."}]},
            {"role": "assistant", "content": "It is... fine!"},
            {"role": "user", "content": "More?"},
        ],
    ]
    for messages in conversations:
        _, tokenized = post(sim.url, "/tokenize", {"model": sim.model, "messages": messages})
        _, answer = post(sim.url, CHAT, {"messages": messages, "max_tokens": 1})
        assert tokenized["count"] == len(tokenized["tokens"]) == answer["usage"]["prompt_tokens"]
        assert tokenized["max_model_len"] == 4096
    assert [
        post(sim.url, "/tokenize", {"messages": [{"role": "user", "content": "a b"}]})[1]["count"],
        post(sim.url, "/tokenize", {"messages": [{"role": "user", "content": "a b c"}]})[1]["count"],
    ] == [10, 11]
    _, tokenized = post(sim.url, "/tokenize", {"prompt": "Hello world, again!"})
    _, answer = post(sim.url, COMPLETIONS, {"prompt": "Hello world, again!", "max_tokens": 1})
    assert tokenized["count"] == answer["usage"]["prompt_tokens"] == 6
    _, text = post(sim.url, "/detokenize", {"tokens": tokenized["tokens"]})
    assert text == {"prompt": "<|begin_of_text|>Hello world, again!"}


def test_errors_like_vllm(sim):
    too_long = " ".join(["word"] * 5000)
    status, body = post(sim.url, CHAT, {"messages": [{"role": "user", "content": too_long}]})
    assert status == 400 and set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "BadRequestError" and body["error"]["code"] == 400
    assert "maximum context length is 4096 tokens" in body["error"]["message"]
    status, body = post(sim.url, COMPLETIONS, {"model": "no-such-model", "prompt": "x"})
    assert status == 404 and body["error"]["type"] == "NotFoundError"
    assert body["error"]["message"] == "The model `no-such-model` does not exist."
    status, body = post(sim.url, CHAT, {"messages": MESSAGES, "stream_options": {"include_usage": True}})
    assert status == 400 and "stream=True" in body["error"]["message"]
    for bad in (
        b"{not json",
        {"messages": []},
        {"messages": MESSAGES, "max_tokens": "many"},
        {"messages": MESSAGES, "n": 0},
        {"messages": MESSAGES, "max_tokens": 5000},
    ):
        status, body = post(sim.url, CHAT, bad)
        assert status == 400 and body["error"]["code"] == 400, bad
    status, body = post(sim.url, COMPLETIONS, {"max_tokens": 3})
    assert status == 400
    assert request(sim.url, "GET", "/no/such/route")[::2] == (404, b'{"detail":"Not Found"}')


def test_api_key(simulator):
    with simulator("--api-key", "sekret", "--served-model-name", "my/model") as sim:
        assert sim.model == "my/model"
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            status, body = post(sim.url, CHAT, {"messages": MESSAGES, "max_tokens": 1}, headers)
            assert (status, body) == (401, {"error": "Unauthorized"})
        assert request(sim.url, "GET", "/v1/models")[0] == 401
        status, body = post(sim.url, CHAT, {"messages": MESSAGES, "max_tokens": 1}, {"Authorization": "Bearer sekret"})
        assert status == 200 and body["model"] == "my/model"
        assert request(sim.url, "GET", "/health")[0] == 200 and post(sim.url, "/tokenize", {"prompt": "x"})[0] == 200


def test_legacy_generate(sim):
    body = {
        "prompt": "The capital of France is",
        "n": 2,
        "use_beam_search": False,
        "temperature": 0.7,
        "max_tokens": 10,
    }
    status, answer = post(sim.url, "/generate", body)
    assert status == 200 and list(answer) == ["text"] and len(answer["text"]) == 2
    for text in answer["text"]:
        assert text.startswith("The capital of France is ") and len(text.split()) <= 5 + 10
    status, _, data = request(
        sim.url,
        "POST",
        "/generate",
        {"prompt": "Go", "max_tokens": 4, "ignore_eos": True, "stream": True, "use_beam_search": True},
    )
    lines = [json.loads(line)["text"][0] for line in data.decode().splitlines()]
    # one line per engine output; outputs that piled up while the server was busy come merged in one line
    assert status == 200 and 1 <= len(lines) <= 4 and len(lines[-1].split()) == 5
    assert all(later.startswith(earlier) and later != earlier for earlier, later in zip(lines, lines[1:], strict=False))


def test_info_routes(sim):
    status, headers, data = request(sim.url, "GET", "/health")
    assert (status, data) == (200, b"")
    assert json.loads(request(sim.url, "GET", "/version")[2]) == {"version": "0.33.0"}
    models = json.loads(request(sim.url, "GET", "/v1/models")[2])
    assert models["object"] == "list" and models["data"][0]["id"] == sim.model
    assert models["data"][0]["owned_by"] == "vllm" and models["data"][0]["max_model_len"] == 4096
    assert json.loads(request(sim.url, "GET", "/load")[2]) == {"server_load": 0}


def test_metrics_names_types_and_buckets(sim):
    post(sim.url, CHAT, {"messages": MESSAGES, "max_tokens": 4, "ignore_eos": True})
    status, headers, data = request(sim.url, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    types = {f.name: f.type for f in text_string_to_metric_families(data.decode())}
    for name, kind in [
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:num_preemptions", "counter"),
        ("vllm:prompt_tokens", "counter"),
        ("vllm:generation_tokens", "counter"),
        ("vllm:request_success", "counter"),
        ("vllm:time_to_first_token_seconds", "histogram"),
        ("vllm:inter_token_latency_seconds", "histogram"),
        ("vllm:e2e_request_latency_seconds", "histogram"),
        ("vllm:request_queue_time_seconds", "histogram"),
        ("vllm:iteration_tokens_total", "histogram"),
    ]:
        assert types.get(name) == kind, name
    text = data.decode()
    assert 'vllm:num_requests_running{engine="0",model_name="vllm-stress/tiny"}' in text
    assert "vllm:num_preemptions_total{" in text and "vllm:gpu_cache_usage_perc" not in text
    samples = metric_samples(sim.url)
    assert samples["vllm:request_success_total", frozenset({("finished_reason", "length")})] >= 1
    assert samples["vllm:generation_tokens_total", frozenset()] >= 4
    ttft_bounds = sorted(
        float(dict(labels)["le"]) for name, labels in samples if name == "vllm:time_to_first_token_seconds_bucket"
    )
    assert ttft_bounds == [*TTFT_BUCKETS, float("inf")]
    e2e_bounds = sorted(
        float(dict(labels)["le"]) for name, labels in samples if name == "vllm:e2e_request_latency_seconds_bucket"
    )
    assert e2e_bounds == [*REQUEST_LATENCY_BUCKETS, float("inf")]


def prefix_cache_counters(url: str) -> tuple[float, ...]:
    samples = metric_samples(url)
    return (
        samples["vllm:prefix_cache_queries_total", frozenset()],
        samples["vllm:prefix_cache_hits_total", frozenset()],
        samples["vllm:prompt_tokens_by_source_total", frozenset({("source", "local_cache_hit")})],
        samples["vllm:prompt_tokens_cached_by_source_total", frozenset({("source", "device")})],
    )


def test_prefix_cache_counters_count_identical_chat_requests(sim):
    messages = [{"role": "user", "content": " ".join(["prefix", "caching", "probe"] * 70)}]
    before = prefix_cache_counters(sim.url)
    prompt_tokens = [
        post(sim.url, CHAT, {"messages": messages, "max_tokens": 2})[1]["usage"]["prompt_tokens"] for _ in range(2)
    ]
    hits = (prompt_tokens[0] - 1) // 16 * 16  # all full blocks, but the last token is computed
    assert prompt_tokens == [218, 218] and hits == 208
    after = prefix_cache_counters(sim.url)
    assert [b - a for a, b in zip(before, after, strict=True)] == [2 * 218, hits, hits, hits]
    _, _, data = request(sim.url, "GET", "/metrics")
    assert 'enable_prefix_caching="True"' in data.decode()


def test_no_enable_prefix_caching_flag(simulator):
    with simulator("--no-enable-prefix-caching") as sim:
        messages = [{"role": "user", "content": " ".join(["same"] * 100)}]
        for _ in range(2):
            assert post(sim.url, CHAT, {"messages": messages, "max_tokens": 2})[0] == 200
        assert prefix_cache_counters(sim.url) == (0, 0, 0, 0)
        assert 'enable_prefix_caching="False"' in request(sim.url, "GET", "/metrics")[2].decode()
