"""From an HTTP request to engine sequences and back: token hand-off from the driver and SSE writing, with
back-pressure (docs/concepts/simulator.md, section 7)."""

from __future__ import annotations

import asyncio
import json
import random

from aiohttp import web

from ..engine.kvcache import prompt_block_hashes
from ..engine.sequence import Sequence
from ..engine.specdecode import chunk_end
from ..model.answers import Reply
from ..model.profiles import Profile
from ..model.sampling import plan_sequence, text_bytes
from .driver import EngineDriver
from .protocol import ChunkFormat
from .requestlog import RequestTiming

WRITE_BUFFER_LIMIT = 0x10000  # bytes waiting in a connection's buffer above which its writes wait for it to drain


class RequestStream:
    """The sequences of one HTTP request (``n`` choices per prompt) and what has been sent of each."""

    __slots__ = (
        "seqs",
        "offsets",
        "replies",
        "published",
        "reasons",
        "sent",
        "interval",
        "streaming",
        "ready",
        "direct",
    )

    def __init__(self, interval: int, streaming: bool) -> None:
        self.seqs: list[Sequence] = []
        self.offsets: list[int] = []  # word-stream offset of each choice's text
        self.replies: list[Reply | None] = []  # each choice's answer to a benchmark question (answers.py), if any
        self.published: list[int] = []  # tokens of each choice whose step has ended
        self.reasons: list[str | None] = []  # finish reason of each choice, once published
        self.sent: list[int] = []  # tokens already passed on, per choice
        self.interval = interval
        self.streaming = streaming
        self.ready = asyncio.Event()
        self.direct: DirectWrites | None = None  # set by write_sse once the response's headers are out

    def add(self, seq: Sequence, offset: int, reply: Reply | None = None) -> None:
        self.seqs.append(seq)
        self.offsets.append(offset)
        self.replies.append(reply)
        self.published.append(0)
        self.reasons.append(None)
        self.sent.append(0)

    def on_token(self, seq: Sequence) -> None:
        index = seq.index
        self.published[index] = seq.num_output
        if seq.finish_reason is not None:
            self.reasons[index] = seq.finish_reason
            self.ready.set()
        elif self.streaming:
            sent = self.sent[index]
            if (sent == 0 or seq.num_output - sent >= self.interval) and not (self.direct and self.direct.write(index)):
                self.ready.set()

    @property
    def finished(self) -> bool:
        return None not in self.reasons

    @property
    def completion_tokens(self) -> int:
        return sum(self.published)

    def reasoning_tokens(self, fmt: ChunkFormat) -> int:
        """Output tokens of all choices that were reasoning (capped by each choice's length)."""
        budget = fmt.reasoning.tokens if fmt.chat and fmt.reasoning else 0
        return sum(min(budget, published) for published in self.published)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens found in the prefix cache when the request was first scheduled (of all its prompts)."""
        return sum(seq.num_cached_tokens for seq in self.seqs if seq.index == 0)

    def text(self, index: int, start: int, end: int) -> bytes:
        """Text of tokens ``start .. end - 1`` of choice ``index``; a final EOS token has no text."""
        if self.reasons[index] == "stop":
            end = min(end, self.published[index] - 1)
        if end <= start:
            return b""
        reply = self.replies[index]
        return (reply.text if reply else text_bytes)(self.offsets[index], start, end)

    def full_text(self, index: int) -> str:
        """The choice's whole text: its tokens are JSON string content, as the chunk templates take them."""
        return json.loads(b'"%s"' % self.text(index, 0, self.published[index]))

    async def wait_finished(self) -> None:
        while not self.finished:
            self.ready.clear()
            await self.ready.wait()


class Generator:
    """Creates the engine sequences of a request: seeded text offsets and EOS positions, ``n`` per prompt sharing
    its block hashes (with prefix caching)."""

    def __init__(self, profile: Profile, driver: EngineDriver, seed: int) -> None:
        self.profile = profile
        self.driver = driver
        self._rng = random.Random(seed)

    def start(
        self,
        prompts: list[tuple[list[int], int]],
        n: int,
        *,
        seed: int | None,
        min_tokens: int,
        ignore_eos: bool,
        interval: int,
        streaming: bool,
        reply: Reply | None = None,
        encoder_flops: float = 0.0,
        external: tuple[int, float] | None = None,
        adapter: str = "",
        priority: int = 0,
    ) -> RequestStream:
        """Submit ``n`` sequences for each ``(prompt token ids, max_tokens)``; choice index = prompt * n + i. With a
        ``reply`` (a question's answer), every choice generates it and ends after it; ``encoder_flops``: the vision
        encoder's work on the prompt's images, charged to the step that first schedules each sequence; ``external``:
        (prompt tokens whose KV arrived from a prefill instance, engine time the request arrived), disagg.py."""
        rng = random.Random(seed if seed is not None else self._rng.getrandbits(64))
        stream = RequestStream(interval, streaming)
        profile = self.profile
        for token_ids, max_tokens in prompts:
            hashes = prompt_block_hashes(token_ids, profile.block_size) if profile.enable_prefix_caching else ()
            for _ in range(n):
                offset, stop_after = plan_sequence(rng, profile, min_tokens, ignore_eos)
                stop_after = reply.length if reply else stop_after
                seq = Sequence(
                    len(token_ids), max_tokens, stop_after, sink=stream, index=len(stream.seqs), block_hashes=hashes
                )
                seq.encoder_flops = encoder_flops
                seq.external_computed = external[0] if external else 0
                seq.adapter = adapter  # a LoRA adapter's name (lora.py), "" for the base model
                seq.priority = priority
                seq.grammar = reply.grammar if reply else ""
                stream.add(seq, offset, reply)
        self.driver.metrics.request_n.observe(n, len(prompts))
        self.driver.submit(stream.seqs, external[1] if external else None)
        return stream


def _due_chunks(stream: RequestStream, fmt: ChunkFormat, index: int) -> list[bytes]:
    position, available = stream.sent[index], stream.published[index]
    reason = stream.reasons[index]
    chunks = []
    while position < available:
        least, ends = 1 if position == 0 else stream.interval, stream.seqs[index].step_ends
        end = min(available, position + least if ends is None else chunk_end(ends, position, available, least))
        last = reason is not None and end == available
        if end - position < stream.interval and position and not last:
            break
        if position == 0 and fmt.chat:
            chunks.append(fmt.role(index))
        chunks.append(fmt.content(index, stream.text(index, position, end), reason if last else None, position, end))
        position = end
    stream.sent[index] = position
    return chunks


class DirectWrites:
    """Writes a streaming response's due chunks from ``on_token``, synchronously, as one HTTP/1.1 chunk.

    Only once the response's headers are out (aiohttp's ``StreamWriter`` then frames every later write as a chunk
    too, so both writers interleave on the one transport in order); the bytes count into the writer's
    ``output_size``, so ``body_length`` and ``http_response_size_bytes`` stay whole."""

    __slots__ = ("stream", "fmt", "writer", "transport", "timing")

    def __init__(self, stream: RequestStream, fmt: ChunkFormat, request: web.Request, timing: RequestTiming | None):
        self.stream = stream
        self.fmt = fmt
        self.writer = request.writer  # aiohttp's StreamWriter of this request
        self.transport = request.transport  # the connection's; it outlives the request
        self.timing = timing

    def write(self, index: int) -> bool:
        """Write choice ``index``'s due chunks now; False when the handler must do it (back-pressure, closing)."""
        transport = self.transport
        if transport is None or transport.is_closing() or transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
            return False
        body = self.fmt.frame(b"".join(_due_chunks(self.stream, self.fmt, index)))
        if body:
            if self.timing:
                self.timing.output_write()
            frame = b"%x\r\n%b\r\n" % (len(body), body)
            self.writer.output_size += len(frame)
            transport.write(frame)
            if self.timing:
                self.timing.output_sent()
        return True


async def write_sse(
    request: web.Request,
    stream: RequestStream,
    fmt: ChunkFormat,
    include_usage: bool,
    timing: RequestTiming | None = None,
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await response.prepare(request)
    if opening := fmt.opening():
        await response.write(fmt.frame(opening))
    writer = request.writer
    while True:
        stream.ready.clear()  # before reading the state: a token published during the write below wakes us again
        finished = stream.finished
        chunks = [chunk for index in range(len(stream.seqs)) for chunk in _due_chunks(stream, fmt, index) if chunk]
        if chunks and timing:
            timing.output_write()  # the write below hands its bytes to the socket before it awaits anything
        if finished:
            if include_usage:
                chunks.append(fmt.usage(stream.completion_tokens, stream.cached_tokens, stream.reasoning_tokens(fmt)))
            chunks.append(fmt.done)
        if chunks:
            await response.write(fmt.frame(b"".join(chunks)))
            if timing:
                timing.output_sent()
            transport = writer.transport
            if transport is not None and transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
                await writer.drain()
        if finished:
            return response
        if stream.direct is None and chunks:
            stream.direct = DirectWrites(stream, fmt, request, timing)
        await stream.ready.wait()
