"""A plain aiohttp server that speaks just enough of vLLM's API for the chat user, writing every token on its own:
the other server implementation the client's CPU per token is measured against (benchmarks/client_cost.py).

    .venv/bin/python -m benchmarks.plain_server --port 8001 [--token-interval 0.02]

``GET /v1/models`` lists one model; ``POST /tokenize`` counts words; ``POST /v1/chat/completions`` (streamed) answers
``max_tokens`` tokens, one ``StreamResponse.write`` per token every ``--token-interval`` seconds, then the usage
chunk and ``[DONE]``, as vLLM's OpenAI server sends them; ``GET /metrics`` gives vLLM's
``vllm:generation_tokens_total`` and ``vllm:request_success_total`` counters. No batching, no engine: each stream is
its own coroutine, the way a hand-written test server streams."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

MODEL = "plain"


class Counts:
    tokens = 0
    requests = 0


async def models(_request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 8192}]})


async def tokenize(request: web.Request) -> web.Response:
    body = await request.json()
    text = body.get("prompt") or " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    return web.json_response({"count": len(text.split()) + (8 if "messages" in body else 0)})


async def metrics(_request: web.Request) -> web.Response:
    return web.Response(
        text=f"vllm:generation_tokens_total {Counts.tokens}\n"
        f'vllm:request_success_total{{finished_reason="length"}} {Counts.requests}\n'
    )


def event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    interval = request.app["interval"]
    created, rid = int(time.time()), request.headers.get("X-Request-Id", "plain")
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"]) + 8
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": MODEL}
    await response.write(event(head | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
    tokens = int(body.get("max_tokens") or 16)
    for i in range(tokens):
        await asyncio.sleep(interval)
        finish = "length" if i == tokens - 1 else None
        choice = {"index": 0, "delta": {"content": " tok"}, "finish_reason": finish}
        await response.write(event(head | {"choices": [choice]}))
        Counts.tokens += 1
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": prompt_tokens + tokens}
    await response.write(event(head | {"choices": [], "usage": usage}) + b"data: [DONE]\n\n")
    Counts.requests += 1
    return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--token-interval", type=float, default=0.02)
    args = parser.parse_args()
    app = web.Application()
    app["interval"] = args.token_interval
    app.add_routes(
        [
            web.get("/v1/models", models),
            web.post("/tokenize", tokenize),
            web.post("/v1/chat/completions", chat),
            web.get("/metrics", metrics),
        ]
    )
    print(f"plain server ready on http://{args.host}:{args.port}", flush=True)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
