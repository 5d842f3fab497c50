"""Wire shapes of a vLLM-compatible server, what a client can depend on without reading the generated text, captured
and compared: the helpers of ``tests/test_fidelity.py`` (its docstring says what a shape holds) and of the realvllm
tier, which checks ``FIXTURE`` against a live vLLM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_shapes.json"
TOKENS = 4  # output tokens per request: role chunk, 3 content chunks, the final one, usage, [DONE]
WORDS = "the of and castle river"
# real vLLM's flags beyond deploy/real-vllm.sh's own that change its /metrics (tests/conftest.py's real_vllm: KV block
# metrics of every block), and the simulator started as that vLLM is, whose shapes the fixture holds
METRICS_FLAGS = ("--kv-cache-metrics", "--kv-cache-metrics-sample", "1")
AS_REAL_VLLM = ("--profile", "cpu-tiny", "--enable-prompt-tokens-details", *METRICS_FLAGS)
# Labels of the info gauge that the reference names; the rest describe engine internals that vary by version.
CACHE_INFO_LABELS = {"engine", "model_name", "block_size", "gpu_memory_utilization", "num_gpu_blocks"}


# Keys that vLLM 0.32.0 (the fixture) and 0.33 (docs/concepts/vllm-protocol.md, which the simulator follows)
# disagree on, per shape; see benchmarks/fidelity.md.
VERSION_KEYS = {
    "chat_stream": {"kv_transfer_params", "weight_versions", "system_fingerprint"},
    "completions_stream": {"kv_transfer_params", "weight_versions", "system_fingerprint"},
    "chat_json": {"weight_versions"},
    "completions_json": {"weight_versions"},
}


def id_prefix(response_id: str) -> str:
    """``chatcmpl-`` or ``cmpl-``: the random part's length differs between vLLM versions (16 or 32 hex)."""
    return re.sub(r"[0-9a-f]+$", "", response_id)


def chunk_shape(chunk: dict) -> dict:
    """The key sets of one SSE chunk, its first choice and delta, and the values that mark its role."""
    shape = {"keys": sorted(chunk), "object": chunk.get("object"), "id": id_prefix(chunk["id"])}
    if chunk.get("choices"):
        choice = chunk["choices"][0]
        shape |= {"choice": sorted(choice), "finish_reason": choice.get("finish_reason")}
        if "delta" in choice:
            shape["delta"] = sorted(choice["delta"])
    if chunk.get("usage"):
        shape["usage"] = sorted(chunk["usage"])
    return shape


def stream_shape(url: str, path: str, body: dict) -> dict:
    with requests.post(url + path, json=body | {"stream": True}, stream=True, timeout=60) as resp:
        resp.raise_for_status()
        events = [line[5:].strip() for line in resp.iter_lines(decode_unicode=True) if line.startswith("data:")]
        content_type = resp.headers["content-type"]
    chunks = [e if e == "[DONE]" else chunk_shape(json.loads(e)) for e in events]
    return {"content_type": content_type, "chunks": chunks}


def json_shape(url: str, path: str, body: dict) -> dict:
    resp = requests.post(url + path, json=body, timeout=60)
    resp.raise_for_status()
    answer = resp.json()
    choice = answer["choices"][0]
    shape = {
        "keys": sorted(answer),
        "object": answer["object"],
        "choice": sorted(choice),
        "usage": sorted(answer["usage"]),
        "id": id_prefix(answer["id"]),
    }
    if "message" in choice:
        shape["message"] = sorted(choice["message"])
    return shape


def error_shape(url: str, path: str, body: dict) -> dict:
    resp = requests.post(url + path, json=body, timeout=60)
    answer = resp.json()
    error = answer.get("error", {})
    return {
        "status": resp.status_code,
        "keys": sorted(answer),
        "error": sorted(error),
        **{key: error.get(key) for key in ("type", "param", "code")},
    }


def tokenize_shape(url: str, chat: dict, completion: dict) -> dict:
    """/tokenize's keys, and whether its count is the prompt_tokens of the same prompt's usage (chat and not)."""
    shape = {}
    for name, path, body, field in (
        ("chat", "/v1/chat/completions", chat, "messages"),
        ("prompt", "/v1/completions", completion, "prompt"),
    ):
        query = {"model": body["model"], field: body[field]} | (
            {"add_generation_prompt": True} if name == "chat" else {}
        )
        tokenized = requests.post(url + "/tokenize", json=query, timeout=10).json()
        usage = requests.post(url + path, json=body, timeout=60).json()["usage"]
        shape[name] = {"keys": sorted(tokenized), "count_is_usage": tokenized["count"] == usage["prompt_tokens"]}
    return shape


def metric_shapes(url: str) -> dict:
    """vLLM's and the HTTP instrumentator's families: type and label names (``_created`` series left out)."""
    shapes = {}
    for family in text_string_to_metric_families(requests.get(url + "/metrics", timeout=10).text):
        if not family.name.startswith(("vllm:", "http_")) or family.name.endswith("_created"):
            continue
        labels = {k for s in family.samples for k in s.labels} - {"le"}
        if family.name == "vllm:cache_config_info":
            labels &= CACHE_INFO_LABELS
        shapes[family.name] = {"type": family.type, "labels": sorted(labels)}
    return shapes


def capture_shapes(url: str, model: str) -> dict:
    """Every shape, from a server that is idle and serves ``model`` with max-model-len 4096."""
    chat = {"model": model, "messages": [{"role": "user", "content": WORDS}], "max_tokens": TOKENS, "ignore_eos": True}
    completion = {"model": model, "prompt": WORDS, "max_tokens": TOKENS, "ignore_eos": True}
    usage = {"stream_options": {"include_usage": True}}
    too_long = " ".join(["the"] * 5000)
    models = requests.get(url + "/v1/models", timeout=10).json()
    return {
        "chat_stream": stream_shape(url, "/v1/chat/completions", chat | usage),
        "completions_stream": stream_shape(url, "/v1/completions", completion | usage),
        "chat_json": json_shape(url, "/v1/chat/completions", chat),
        "completions_json": json_shape(url, "/v1/completions", completion),
        "errors": {
            "chat_unknown_model": error_shape(url, "/v1/chat/completions", chat | {"model": "no-such-model"}),
            "completions_unknown_model": error_shape(url, "/v1/completions", completion | {"model": "no-such-model"}),
            "chat_prompt_too_long": error_shape(
                url, "/v1/chat/completions", chat | {"messages": [{"role": "user", "content": too_long}]}
            ),
            "completions_prompt_too_long": error_shape(url, "/v1/completions", completion | {"prompt": too_long}),
            "chat_stream_options_without_stream": error_shape(url, "/v1/chat/completions", chat | usage),
        },
        "models": {"keys": sorted(models), "card": sorted(models["data"][0])},
        "tokenize": tokenize_shape(url, chat, completion),
        "metrics": metric_shapes(url),
    }


def differences(expected, actual, path: str = "") -> list[str]:
    """Readable differences between two shapes (vLLM's first): missing/extra keys, changed values, lengths."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        found = []
        for key in sorted(set(expected) | set(actual)):
            if key not in actual:
                found.append(f"{path}/{key}: missing (vLLM: {json.dumps(expected[key])})")
            elif key not in expected:
                found.append(f"{path}/{key}: extra (vLLM has none)")
            else:
                found += differences(expected[key], actual[key], f"{path}/{key}")
        return found
    if isinstance(expected, list) and isinstance(actual, list) and all(isinstance(x, str) for x in expected + actual):
        missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
        return [f"{path}: missing {missing}, extra {extra}"] if missing or extra else []
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(actual)} items, vLLM {len(expected)}"]
        return [
            d for i, (e, a) in enumerate(zip(expected, actual, strict=True)) for d in differences(e, a, f"{path}[{i}]")
        ]
    return [] if expected == actual else [f"{path}: {json.dumps(actual)}, vLLM {json.dumps(expected)}"]


def dump_shapes(shapes: dict) -> str:
    """The fixture's text: indented JSON with each key list on one line, so a diff shows what changed."""
    text = json.dumps(shapes, indent=1)
    return (
        re.sub(r'\[\s+("[^"]*"(?:,\s+"[^"]*")*)\s+\]', lambda m: "[" + re.sub(r",\s+", ", ", m[1]) + "]", text) + "\n"
    )


def without(shape, keys: set[str]):
    """``shape`` with the strings in ``keys`` removed from its key lists."""
    if isinstance(shape, dict):
        return {k: without(v, keys) for k, v in shape.items()}
    if isinstance(shape, list):
        return [without(x, keys) for x in shape if not (isinstance(x, str) and x in keys)]
    return shape


def version_neutral(shapes: dict) -> dict:
    """The shapes without the keys that vLLM versions disagree on."""
    return shapes | {name: without(shapes[name], keys) for name, keys in VERSION_KEYS.items()}


def simulator_differences(vllm_shapes: dict, url: str, model: str) -> list[str]:
    return differences(version_neutral(vllm_shapes), version_neutral(capture_shapes(url, model)))
