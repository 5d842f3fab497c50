"""One request's measurement: its output chunks' times, the server's usage counts, how it ended, its row."""

from __future__ import annotations

import itertools
import json
import os
import secrets
import time
from typing import Any

from vllm_stress.client.canary import Canary
from vllm_stress.client.cancel import CancelAfter, cancelled
from vllm_stress.client.structured import JsonSchema
from vllm_stress.core import metrics, schema
from vllm_stress.core.failures import StreamError

REQUEST_ID_HEADER = "X-Request-Id"  # vLLM takes it as the request id (and echoes it with --enable-request-id-headers)
TRACEPARENT_HEADER = "traceparent"  # W3C trace context: vLLM's request span continues it (vllm_stress.core.spans)
_ID_PREFIX = secrets.token_hex(4)  # tells load-generator hosts apart; forked workers differ by their pid
_ids = itertools.count()


def new_request_id() -> str:
    """A request id unique across the run's processes, sent as ``X-Request-Id`` (vLLM adopts it as its own)."""
    return f"{_ID_PREFIX}-{os.getpid()}-{next(_ids)}"


class Exchange:
    """Collects what one request measured; ``row()`` turns it into a ``requests.csv`` row."""

    __slots__ = (
        "canary",
        "model",
        "text",
        "name",
        "stats_name",
        "users",
        "target_prompt_tokens",
        "max_tokens",
        "check_output",
        "start_wall",
        "start",
        "first",
        "last",
        "end",
        "chunks",
        "gaps",
        "prompt_tokens",
        "completion_tokens",
        "finish_reason",
        "status",
        "error",
        "schedule_lag",
        "cached_tokens",
        "request_id",
        "start_real",
        "session_id",
        "turn",
        "answer",
        "reasoning_chunks",
        "reasoning_tokens",
        "replica",
        "images",
        "image_tokens",
        "image_bytes",
        "videos",
        "video_tokens",
        "video_bytes",
        "adapter",
        "traffic_class",
        "json_schema",
        "answer_valid",
        "task_id",
        "step",
        "shared_prefix_tokens",
        "endpoint",
        "cancel",
        "cancel_chunk",
        "inputs",
        "trace_blocks",
        "trace_reused_blocks",
        "session_turns",
        "connect",
        "burst",
        "audio_s",
        "output_needed",
    )

    def __init__(
        self, name: str, users: int, target_prompt_tokens: int | None, max_tokens: int, check_output: bool
    ) -> None:
        self.name = name
        self.stats_name = name  # its entry in Locust's statistics (client.classes.stats_name)
        self.users = users
        self.target_prompt_tokens = target_prompt_tokens
        self.max_tokens = max_tokens
        self.check_output = check_output  # output length is forced (ignore_eos), so it must equal max_tokens
        self.start_wall = time.time()
        self.start_real = self.start_wall  # time.time() read right before ``start``: converts kernel times
        self.start = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        self.end: float | None = None
        self.chunks = 0
        self.gaps: list[float] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reason = ""
        self.status = 0
        self.error = ""
        self.schedule_lag: float | None = None  # open loop: scheduled arrival -> send
        self.cached_tokens: int | None = None
        self.request_id = new_request_id()
        self.session_id = ""  # multi-turn sessions (locustfiles/session.py)
        self.turn: int | None = None
        self.replica = ""  # the replica's host:port with client-side spreading (-H naming several)
        self.answer: float | None = None  # the first output chunk that was not reasoning (perf_counter seconds)
        self.reasoning_chunks = 0
        self.reasoning_tokens: int | None = None  # usage.completion_tokens_details, when the server says it
        self.images = 0  # images sent with the prompt (--images)
        self.image_tokens = 0  # the prompt tokens they add, as measured at test start
        self.image_bytes = 0  # the bytes of their data URLs
        self.videos = 0  # videos sent with the prompt (--videos)
        self.video_tokens = 0  # the prompt tokens they add, as measured at test start
        self.video_bytes = 0  # the bytes of their data URLs
        self.adapter = ""  # the model it asked for when drawn per request (--lora-adapters), else ""
        self.canary: Canary | None = None  # a correctness canary (--canary-share): its answer is kept
        self.model = ""  # a canary's: the model it asked (answers.csv)
        self.text: list[str] | None = None  # a canary's or structured answer as it came (None: not kept)
        self.traffic_class = ""  # the user's traffic class (--traffic-class), "" without
        self.json_schema: JsonSchema | None = None  # the structured output it asked for (--json-schema)
        self.answer_valid = ""  # structured.VALID, INVALID or CUT once judged
        self.shared_prefix_tokens: int | None = None  # --prefix-hit-rate: leading tokens built to be shared
        self.task_id = ""  # an agent task's request (users/agent.py): its task and step
        self.step: int | None = None
        self.endpoint = ""  # the API path it went to: /v1/chat/completions, /v1/responses, /v1/messages ...
        self.cancel: CancelAfter | None = None  # --cancel-share: where the client cuts it (cut_at), None: nowhere
        self.cancel_chunk = 0  # the output chunk the client cuts it at (0: none)
        self.inputs: int | None = None  # a pooling request's inputs or documents (users/pooling.py), else None
        self.trace_blocks: int | None = None  # --trace, --session-trace: the hash ids its prompt was made of
        self.trace_reused_blocks: int | None = None  # --session-trace: those an earlier turn of its session had
        self.session_turns: int | None = None  # --session-trace: the turns of its recorded session
        self.connect: float | None = None  # seconds the connection it opened took (None: it reused one; pools.py)
        self.burst: int | None = None  # --microburst: the burst it was sent in, from 1 (None: not a burst's)
        self.audio_s: float | None = None  # an audio request's seconds of audio sent (users/audio.py), else None
        self.output_needed = True  # a stream must carry output; a session primer, sent for its prefill, need not

    def cut_at(self, cancel: CancelAfter | None) -> None:
        """The client cancels this request at ``cancel`` (its delay is the sender's deadline, its chunks ``output``'s)."""
        self.cancel = cancel
        tokens = (cancel.tokens or 0) if cancel else 0
        self.cancel_chunk = tokens if tokens < self.max_tokens else 0  # a cut at its last token would cut nothing

    def sent(self) -> None:
        """The request is about to be sent: the send time, as late as the caller can take it."""
        self.start_real = self.start_wall = time.time()
        self.start = time.perf_counter()

    def left(self, unix_time: float) -> None:
        """The kernel's time the request's last bytes left (stream.py), when it is this request's: the send time."""
        if unix_time > self.start_real:
            self.start += unix_time - self.start_real
            self.start_real = self.start_wall = unix_time

    def output(self, now: float, reasoning: bool = False) -> None:
        """An output-bearing chunk arrived at ``now`` (perf_counter seconds); ``reasoning``: it carried a reasoning
        model's thinking, not its answer."""
        if reasoning:
            self.reasoning_chunks += 1
        elif self.answer is None:
            self.answer = now
        if self.last is None:
            self.first = now
        else:
            self.gaps.append(now - self.last)
        self.last = now
        self.chunks += 1
        if self.chunks == self.cancel_chunk:
            raise cancelled()

    def check_stream_end(self, done: bool, end: str = "data: [DONE]") -> None:
        """The rule for a complete stream, for every streaming user: it ended with its closing event ``end``
        (``done``) and at least one chunk carried output (unless none was needed: ``output_needed``)."""
        if not done:
            raise StreamError("StreamTruncated", f"the stream ended without {end}")
        if not self.chunks and self.output_needed:
            raise StreamError("NoOutput", "no chunk carried output")

    def usage(self, usage: dict[str, Any]) -> None:
        self.prompt_tokens = usage.get("prompt_tokens")
        self.completion_tokens = usage.get("completion_tokens")
        self.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        self.reasoning_tokens = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")

    def fail(self, name: str) -> None:
        """Mark the request failed with error class ``name`` (the first failure wins)."""
        if not self.error:
            self.error = name
        self.finish()

    def finish(self) -> None:
        """The request is over: e2e ends at the last output chunk, else now."""
        if self.end is None:
            self.end = self.last if (self.last is not None and not self.error) else time.perf_counter()

    def progress(self) -> list[float]:
        """[start, first output chunk (the start before it), chunks so far] in unix seconds, while in flight."""
        first = self.start_wall if self.first is None else self.start_wall + (self.first - self.start)
        return [self.start_wall, first, self.chunks]

    @property
    def e2e(self) -> float:
        return (self.end if self.end is not None else time.perf_counter()) - self.start

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.start

    @property
    def ttfa(self) -> float | None:
        """Time to the first answer chunk (after a reasoning model's thinking)."""
        return None if self.answer is None else self.answer - self.start

    @property
    def reasoned(self) -> int | None:
        """Reasoning tokens: the server's count, else the reasoning chunks (None when neither says any)."""
        return self.reasoning_tokens if self.reasoning_tokens is not None else (self.reasoning_chunks or None)

    @property
    def tpot(self) -> float | None:
        return metrics.tpot(self.e2e, self.ttft, self.completion_tokens)

    @property
    def measured(self) -> bool:
        """Successful, on its token targets and not aborted by the server: the population of every latency
        percentile (``vllm_stress.analysis.measures.classify`` applies the same rule to the rows of requests.csv)."""
        return not self.error and not self.count_mismatch() and self.finish_reason != "abort"

    def count_mismatch(self) -> bool:
        prompt_off = (
            None not in (self.prompt_tokens, self.target_prompt_tokens)
            and self.prompt_tokens != self.target_prompt_tokens
        )
        output_off = (
            self.check_output and self.completion_tokens is not None and self.completion_tokens != self.max_tokens
        )
        return bool(prompt_off or output_off)

    def row(self, worker: str) -> list[float | int | str]:
        """The ``requests.csv`` row, in ``vllm_stress.core.schema.REQUEST_COLUMNS`` order."""
        e2e = self.e2e
        ok = not self.error
        return [
            round(self.start_wall, 6),
            round(self.start_wall + e2e, 6),
            _opt(self.ttft),
            _opt(self.tpot),
            round(e2e, 6),
            self.chunks,
            _opt(self.prompt_tokens),
            _opt(self.completion_tokens),
            _opt(self.target_prompt_tokens),
            self.max_tokens,
            int(ok and self.count_mismatch()),
            int(ok),
            self.error,
            self.status,
            self.finish_reason,
            self.users,
            worker,
            self.name,
            _opt(self.schedule_lag),
            _opt(self.cached_tokens),
            self.request_id,
            self.session_id,
            _opt(self.turn),
            _opt(self.ttfa),
            _opt(self.reasoned),
            self.replica,
            self.images,
            self.image_tokens,
            self.image_bytes,
            self.videos,
            self.video_tokens,
            self.video_bytes,
            self.canary.id if self.canary else "",
            self.adapter,
            self.traffic_class,
            self.json_schema.id if self.json_schema else "",
            int(self.json_schema.first_use) if self.json_schema else "",
            self.answer_valid,
            self.task_id,
            _opt(self.step),
            _opt(self.shared_prefix_tokens),
            self.endpoint,
            self.cancel.label if self.cancel else "",
            _opt(self.inputs),
            _opt(self.trace_blocks),
            _opt(self.trace_reused_blocks),
            _opt(self.session_turns),
            _opt(self.connect),
            _opt(self.burst),
            _opt(self.audio_s),
        ]

    def answer_row(self, worker: str) -> list[int | str]:
        """A canary's ``answers.csv`` row, in ``vllm_stress.core.schema.ANSWER_COLUMNS`` order."""
        assert self.canary is not None
        text = "".join(self.text or ())[: schema.ANSWER_MAX_CHARS]
        ok = int(not self.error)
        return [self.request_id, self.users, worker, self.canary.id, self.model, ok, self.canary.gold, text]

    def keep_text(self, piece: object) -> None:
        """Add a piece of a kept answer (a chunk's content, or a whole non-streamed answer)."""
        if self.text is not None and isinstance(piece, str):
            self.text.append(piece)


def is_output_delta(delta: dict[str, Any]) -> bool:
    """Whether a chat chunk's ``delta`` carries output, by vLLM's benchmark rule
    (``vllm/benchmarks/lib/endpoint_request_func.py``)."""
    if delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls"):
        return True
    return delta.get("content") == "" and "role" not in delta


def is_reasoning_delta(delta: dict[str, Any]) -> bool:
    """Whether an output-bearing chat ``delta`` carries only a reasoning model's thinking: ``reasoning`` (vLLM's
    current name) or ``reasoning_content`` (its older one), and no answer ``content``."""
    return not delta.get("content") and bool(delta.get("reasoning") or delta.get("reasoning_content"))


def _opt(value: float | int | str | None) -> float | int | str:
    if value is None:
        return ""
    return round(value, 6) if isinstance(value, float) else value


def error_event(obj: dict[str, Any]) -> StreamError:
    """The failure for an in-stream ``{"error": {...}}`` event (vLLM sends these after a 200)."""
    err = obj.get("error")
    kind = (err.get("type") or "error") if isinstance(err, dict) else "error"
    return StreamError(f"StreamError {kind}", json.dumps(err)[:200])


def response_error(status: int, body: bytes) -> StreamError:
    """The failure for a non-200 response, with vLLM's error message when the body has one."""
    detail = body[:300].decode("utf-8", "replace")
    try:
        err = json.loads(body).get("error")
        detail = err.get("message", detail) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        pass
    return StreamError(f"HTTP {status}", detail)
