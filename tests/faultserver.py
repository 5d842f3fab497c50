"""A loopback test double that speaks vLLM's chat API and misbehaves on command (not a simulator: no engine).

The fault is chosen by a path prefix, so one server serves every case and the users' own paths are unchanged:
``-H {server.url}/fault/http503`` makes ``POST /fault/http503/v1/chat/completions`` answer 503, while
``/fault/http503/v1/models`` and ``/fault/http503/tokenize`` behave normally (the users can prepare).
``/cycle/ok,cut,hang/...`` applies the listed faults in turn, request after request. No prefix: no fault.
``/llm-d/...`` answers without a fault and pins like llm-d's session-affinity scorer: a chat request that sends no
``llm-d-session`` cookie gets one naming a new "pod" (``pod-1``, ``pod-2``...) on its response.

Faults (``FAULTS``): ``ok``; ``http<code>`` (vLLM's JSON error body with that status); ``cut`` (the connection is
closed after a few chunks); ``no-done`` (the body ends cleanly without ``data: [DONE]``); ``malformed-json``;
``malformed-sse`` (a line without ``data:``); ``stream-error`` (vLLM's in-stream ``{"error": ...}`` event, then
``[DONE]``); ``hang`` (the request is read and never answered); ``stall`` (headers and one chunk, then silence);
``slow-headers`` (the headers come after ``SLOW_HEADERS_S``).

Every chat request is counted when it arrives, before its fault: ``received`` lists the fault each one got, per
prefix, in arrival order, ``headers`` its headers (cookies included), ``every`` each request's path and headers (of
any kind, chat or not), and ``pinned`` the llm-d cookie each response
set (``""``: none). Tokens are words: ``/tokenize`` and ``usage`` agree (a prompt of n words is n + 3 tokens).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import defaultdict
from collections.abc import Mapping

from aiohttp import web

MODEL = "fault-model"
MAX_MODEL_LEN = 4096
LLM_D_COOKIE = "llm-d-session"  # llm-d-inference-scheduler, pkg/plugins/scorer/session_affinity.go
TEMPLATE_TOKENS = 3  # what the "chat template" adds to a prompt's words
TOKEN_DELAY_S = 0.002
SLOW_HEADERS_S = 0.5
ERROR_TYPES = {
    400: "BadRequestError",
    401: "Unauthorized",
    404: "NotFoundError",
    429: "TooManyRequests",
    500: "InternalServerError",
    503: "Service Unavailable",
}
FAULTS = (
    "ok",
    *(f"http{code}" for code in ERROR_TYPES),
    "cut",
    "no-done",
    "malformed-json",
    "malformed-sse",
    "stream-error",
    "hang",
    "stall",
    "slow-headers",
)


def chunk(delta: dict, finish_reason=None, **extra) -> bytes:
    """One chat SSE event in vLLM's key order (so the users' no-parse fast path sees what it sees from vLLM)."""
    body = {
        "id": "chatcmpl-fault",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        **extra,
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def error_body(code: int, message: str) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(code, "Error"), "param": None, "code": code}}


def count_tokens(text: str) -> int:
    return len(text.split()) + TEMPLATE_TOKENS


class FaultServer:
    """``start()`` serves on 127.0.0.1 (a free port) from a thread; ``url``, ``received``, ``stop()``."""

    def __init__(self, ssl_context=None) -> None:
        self.ssl_context = ssl_context
        self.received: dict[str, list[str]] = defaultdict(list)  # prefix -> fault of each chat request
        self.headers: dict[str, list[Mapping[str, str]]] = defaultdict(list)  # prefix -> each chat request's headers
        self.pinned: dict[str, list[str]] = defaultdict(list)  # prefix -> llm-d cookie set on each chat response
        self.every: list[tuple[str, Mapping[str, str]]] = []  # every request's path and headers, whatever its kind
        self.url = ""
        self._cycles: dict[str, int] = defaultdict(int)
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None

    def start(self) -> FaultServer:
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True, name="fault-server").start()
        if not ready.wait(10):
            raise RuntimeError("the fault server did not start")
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def chat_requests(self, prefix: str) -> int:
        return len(self.received[prefix])

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._route)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        self._loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self.url = f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{port}"
        ready.set()
        self._loop.run_forever()

    def _fault(self, prefix: str) -> str:
        """The fault of the next chat request under ``prefix``."""
        kind, _, arg = prefix.strip("/").partition("/")
        if kind == "fault":
            return arg
        if kind == "cycle":
            faults = arg.split(",")
            index = self._cycles[prefix]
            self._cycles[prefix] += 1
            return faults[index % len(faults)]
        return "ok"

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        self.every.append((path, request.headers.copy()))
        for endpoint in ("/v1/chat/completions", "/v1/models", "/tokenize"):
            if path.endswith(endpoint):
                prefix = path[: -len(endpoint)]
                break
        else:
            return web.json_response({"detail": "Not Found"}, status=404)
        if endpoint == "/v1/models":
            return web.json_response(
                {
                    "object": "list",
                    "data": [{"id": MODEL, "object": "model", "owned_by": "vllm", "max_model_len": MAX_MODEL_LEN}],
                }
            )
        body = await request.json()
        if endpoint == "/tokenize":
            text = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
            return web.json_response({"count": count_tokens(text), "max_model_len": MAX_MODEL_LEN})
        fault = self._fault(prefix)
        self.received[prefix].append(fault)
        self.headers[prefix].append(request.headers.copy())
        unpinned = prefix.startswith("/llm-d") and LLM_D_COOKIE not in request.cookies
        pod = f"pod-{sum(map(bool, self.pinned[prefix])) + 1}" if unpinned else ""
        self.pinned[prefix].append(pod)
        if body.get("model") != MODEL:
            return web.json_response(error_body(404, f"The model `{body.get('model')}` does not exist."), status=404)
        return await self._chat(request, body, fault, pod)

    async def _chat(self, request: web.Request, body: dict, fault: str, pod: str = "") -> web.StreamResponse:
        if fault.startswith("http"):
            code = int(fault[4:])
            return web.json_response(error_body(code, f"injected {code}"), status=code)
        if fault == "hang":
            await asyncio.Event().wait()  # cancelled when the client goes away
        if fault == "slow-headers":
            await asyncio.sleep(SLOW_HEADERS_S)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        if pod:
            response.set_cookie(LLM_D_COOKIE, pod)
        await response.prepare(request)
        await response.write(chunk({"role": "assistant", "content": ""}, prompt_token_ids=None))
        if fault == "stall":
            await asyncio.Event().wait()
        prompt = count_tokens(" ".join(message["content"] for message in body["messages"]))
        tokens = int(body["max_tokens"])
        for index in range(tokens):
            if index == 2 and fault in ("cut", "malformed-json", "malformed-sse", "stream-error"):
                await self._misbehave(request, response, fault)
                return response
            await asyncio.sleep(TOKEN_DELAY_S)
            last = index == tokens - 1
            await response.write(chunk({"content": f" w{index}"}, "length" if last else None))
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + tokens, "completion_tokens": tokens}
        await response.write(
            b"data: " + json.dumps({"id": "chatcmpl-fault", "choices": [], "usage": usage}).encode() + b"\n\n"
        )
        if fault != "no-done":
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    @staticmethod
    async def _misbehave(request: web.Request, response: web.StreamResponse, fault: str) -> None:
        if fault == "cut":
            request.transport.abort()  # no last chunk: the client sees the connection end mid-body
            return
        if fault == "malformed-json":
            await response.write(b'data: {"choices": [{"index": 0, "delta": \n\n')
        elif fault == "malformed-sse":
            await response.write(b'{"choices": []}\n\n')
        elif fault == "stream-error":
            await response.write(b"data: " + json.dumps(error_body(500, "engine died")).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
