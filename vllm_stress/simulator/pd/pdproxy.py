"""The proxy in front of a P/D simulator, taking a request's path as vLLM's disaggregated-serving example proxy does
(``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``): round robin to a prefill instance with
``max_tokens`` 1, no streaming and ``kv_transfer_params`` asking for a remote decode; then, with the parameters the
prefill instance returned, round robin to a decode instance, whose answer it streams back as it comes. Other API
paths a test start probes (``/v1/models``, ``/tokenize``, ``/version``) go to the first decode instance; it has no
``/metrics``: each instance exports its own."""

from __future__ import annotations

import itertools
import json
import uuid

import aiohttp
from aiohttp import web

from ..api.requestlog import REQUEST_ID_HEADER

FORWARDED_HEADERS = ("Authorization", "traceparent")
FORWARDED_GETS = (
    "/v1/models",
    "/version",
    "/health",
)  # the test start's probes; no /metrics: each instance has its own
FORWARDED_POSTS = ("/tokenize", "/detokenize")
REMOTE_DECODE = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_body(body: dict) -> dict:
    """The request as the prefill instance gets it: one token, not streamed, asking for a remote decode."""
    prefill = dict(body, kv_transfer_params=REMOTE_DECODE, stream=False, max_tokens=1)
    if "max_completion_tokens" in prefill:
        prefill["max_completion_tokens"] = 1
    for key in ("stream_options", "min_tokens", "min_completion_tokens"):
        prefill.pop(key, None)
    return prefill


class Proxy:
    def __init__(self, prefill: list[str], decode: list[str], api_key: str | None = None) -> None:
        self.prefill = itertools.cycle(prefill)
        self.decode = itertools.cycle(decode)
        self.first_decode = decode[0]
        self.api_key = api_key
        self.session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/v1/completions", self.generate)
        for path in FORWARDED_GETS:
            app.router.add_get(path, self.forward)
        for path in FORWARDED_POSTS:
            app.router.add_post(path, self.forward)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0)
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))

    async def _close(self, _app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    def _headers(self, request: web.Request) -> dict[str, str]:
        headers = {name: request.headers[name] for name in FORWARDED_HEADERS if name in request.headers}
        headers[REQUEST_ID_HEADER] = request.headers.get(REQUEST_ID_HEADER) or str(uuid.uuid4())
        return headers

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """Prefill, then decode with the prefill's KV parameters; an instance's error goes back as it came."""
        assert self.session is not None  # opened on startup
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):  # the decode instance answers it as vLLM would
            return await self._relay(request, self.first_decode, raw)
        headers = self._headers(request)
        async with self.session.post(
            next(self.prefill) + request.path, json=prefill_body(body), headers=headers
        ) as prefill:
            answer = await prefill.read()
            if prefill.status != 200:
                return web.Response(body=answer, status=prefill.status, content_type="application/json")
        params = json.loads(answer).get("kv_transfer_params")
        if params:
            body["kv_transfer_params"] = params
        return await self._relay(request, next(self.decode), json.dumps(body).encode(), headers)

    async def forward(self, request: web.Request) -> web.StreamResponse:
        return await self._relay(request, self.first_decode, await request.read())

    async def _relay(
        self, request: web.Request, base: str, data: bytes, headers: dict[str, str] | None = None
    ) -> web.StreamResponse:
        """``request`` sent to ``base`` with ``data`` as its body, the answer streamed back chunk by chunk."""
        assert self.session is not None
        headers = dict(headers or self._headers(request), **{"Content-Type": "application/json"})
        async with self.session.request(request.method, base + request.path_qs, data=data, headers=headers) as answer:
            response = web.StreamResponse(status=answer.status)
            response.content_type = answer.content_type
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
