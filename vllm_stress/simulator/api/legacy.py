"""``POST /generate`` of vLLM's old demo server (``python -m vllm.entrypoints.api_server``)
(docs/concepts/simulator.md, section 10)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from ..model.errors import ApiError
from .parsing import COMPLETIONS_DEFAULT_MAX_TOKENS, parse_json, resolve_max_tokens
from .parsing import parse_generation as parse_sampling
from .protocol import json_bytes

if TYPE_CHECKING:
    from .instance import Instance
    from .streams import RequestStream


def _texts(prompt: str, stream: RequestStream) -> dict:
    return {"text": [prompt + stream.full_text(index) for index in range(len(stream.seqs))]}


async def generate(request: web.Request, simulator: Instance) -> web.StreamResponse:
    body = parse_json(await request.read())
    prompt = body.pop("prompt", None)
    streaming = body.pop("stream", False) is True
    if not isinstance(prompt, str):
        raise ApiError("'prompt' (a string) is required", param="prompt")
    sampling = parse_sampling(body, [prompt])
    token_ids = simulator.tokenizer.encode(prompt)
    max_tokens = resolve_max_tokens(
        sampling, len(token_ids), simulator.profile.max_model_len, COMPLETIONS_DEFAULT_MAX_TOKENS
    )
    stream = simulator.generator.start(
        [(token_ids, max_tokens)],
        sampling.n,
        seed=sampling.seed,
        min_tokens=sampling.min_tokens,
        ignore_eos=sampling.ignore_eos,
        interval=1,
        streaming=streaming,
    )
    try:
        if not streaming:
            await stream.wait_finished()
            return web.Response(body=json_bytes(_texts(prompt, stream)), content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        written = 0
        while True:
            stream.ready.clear()
            finished = stream.finished
            if stream.completion_tokens > written:
                written = stream.completion_tokens
                await response.write(json_bytes(_texts(prompt, stream)) + b"\n")
            if finished:
                return response
            await stream.ready.wait()
    finally:
        simulator.driver.abort(stream.seqs)
