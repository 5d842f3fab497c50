"""The simulator's OpenTelemetry request spans (``--otlp-traces-endpoint``): for each finished request that carried
a ``traceparent``, the span vLLM exports (same name and ``gen_ai.*`` attributes, vllm_stress.core.spans) from the
engine's own record of the request, sent in batches over OTLP/HTTP protobuf off the request path
(docs/concepts/traces.md)."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from vllm_stress.core.otlp import PROTOBUF, ExportedSpan, export_body
from vllm_stress.core.schema import SERVER_SPAN_ATTRIBUTES
from vllm_stress.core.spans import INFERENCE_ATTRIBUTE, REQUEST_ID_ATTRIBUTE, trace_context

from ..engine.sequence import Sequence

log = logging.getLogger(__name__)

EXPORT_INTERVAL_S = 0.5  # a batch at most this often (vLLM's BatchSpanProcessor: every 5 s by default)
EXPORT_TIMEOUT_S = 10.0
SERVICE_NAME = "vllm-stress-simulator"


class SpanExporter:
    """Spans of finished requests, queued by ``add`` and posted by a background task every EXPORT_INTERVAL_S."""

    def __init__(self, endpoint: str, time_scale: float) -> None:
        self.endpoint = endpoint
        self.time_scale = time_scale
        self.queue: list[ExportedSpan] = []
        self.failures = 0
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None

    def add(self, traceparent: str, request_id: str, seq: Sequence, engine_now: float, prompt_tokens: int) -> None:
        """Queue the span of a request whose first sequence ``seq`` finished (not aborted), at engine time
        ``engine_now``; nothing when ``traceparent`` is not a valid W3C header."""
        context = trace_context(traceparent)
        if context is None or seq.first_token is None or seq.finish_reason in (None, "abort"):
            return
        scale = self.time_scale
        seconds = {
            "queue_s": seq.queue_time(),
            "ttft_s": seq.ttft(),
            "prefill_s": seq.prefill_time(),
            "decode_s": seq.decode_time(),
            "e2e_s": seq.e2e(),
        }
        attributes: dict[str, float | int | str] = {SERVER_SPAN_ATTRIBUTES[k]: v / scale for k, v in seconds.items()}
        attributes[INFERENCE_ATTRIBUTE] = seq.inference_time() / scale
        attributes[SERVER_SPAN_ATTRIBUTES["prompt_tokens"]] = prompt_tokens
        attributes[SERVER_SPAN_ATTRIBUTES["completion_tokens"]] = seq.num_output
        attributes[REQUEST_ID_ATTRIBUTE] = request_id
        end = time.time_ns()
        start = end - int((engine_now - seq.arrival) / scale * 1e9)
        self.queue.append((*context, start, end, attributes))

    def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=EXPORT_TIMEOUT_S))
        self._task = asyncio.create_task(self._export_every(), name="span-export")

    async def stop(self) -> None:
        """Send what is queued and close."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._export()
        if self._session is not None:
            await self._session.close()

    async def _export_every(self) -> None:
        while True:
            await asyncio.sleep(EXPORT_INTERVAL_S)
            await self._export()

    async def _export(self) -> None:
        if not self.queue or self._session is None:
            return
        spans, self.queue = self.queue, []
        body = await asyncio.get_running_loop().run_in_executor(None, export_body, spans, SERVICE_NAME)
        try:
            async with self._session.post(self.endpoint, data=body, headers={"Content-Type": PROTOBUF}) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.failures += 1
            if self.failures == 1:  # one line, not one per batch
                log.warning("OTLP export to %s failed (%s): %d spans dropped", self.endpoint, exc, len(spans))
