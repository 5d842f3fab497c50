"""vLLM's speech-to-text APIs as the simulator serves them (``POST /v1/audio/transcriptions`` and
``/v1/audio/translations``, its ``speech_to_text`` serving): a multipart form whose ``file`` is a WAV, run as one
request on the same engine, its audio costed as encoder FLOPs (the profile's ``audio_encoder_flops_per_s``) and its
transcript as decoder tokens, answered with vLLM's bodies and ``transcription.chunk`` stream
(docs/guides/endpoints.md, "Audio: transcription and translation")."""

from __future__ import annotations

import io
import math
import wave
from dataclasses import dataclass

from aiohttp import web

from ..model.answers import Reply
from ..model.errors import ApiError
from ..model.profiles import Profile
from .parsing import GenerationRequest, check_model, resolve_max_tokens
from .protocol import ChunkFormat, json_bytes, new_request_id, usage_json
from .requestlog import REQUEST_ID_HEADER
from .typedapi import Answer

TASKS = {"/v1/audio/transcriptions": "transcribe", "/v1/audio/translations": "translate"}
CHUNK_KINDS = {"transcribe": "transcription.chunk", "translate": "translation.chunk"}
MAX_FILE_BYTES = 25 * 1024**2  # VLLM_MAX_AUDIO_CLIP_FILESIZE_MB's default
DECODER_PROMPT = (50258, 50259, 50360, 50364)  # Whisper's <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
WORDS_PER_S = 2.5  # the transcript's speech rate: about 150 words a minute
TOKENS_PER_WORD = 4 / 3  # about 100 tokens per 75 English words
WORD = b" la"  # the transcript's every word: a tone, sung
TRUE, FALSE = {"1", "true", "t", "yes", "y", "on"}, {"0", "false", "f", "no", "n", "off"}  # pydantic's booleans


def audio_seconds(data: bytes) -> float:
    """The length of a WAV file's audio; vLLM's 400 for a file it cannot read (the simulator reads WAV only)."""
    if len(data) > MAX_FILE_BYTES:
        raise ApiError("Maximum file size exceeded", param="audio_filesize_mb")
    try:
        with wave.open(io.BytesIO(data)) as wav:
            return wav.getnframes() / wav.getframerate()
    except (wave.Error, EOFError, ZeroDivisionError):
        raise ApiError("Invalid or unsupported audio file.") from None


def transcript_tokens(seconds: float) -> int:
    """The transcript's output tokens, EOS included: ~2.5 words a second of audio, 4/3 tokens a word."""
    return math.ceil(math.ceil(seconds * WORDS_PER_S) * TOKENS_PER_WORD) + 1


def flag(form: dict[str, str], name: str) -> bool:
    """A form field read as a boolean (absent: false)."""
    value = form.get(name, "false").lower()
    if value not in TRUE | FALSE:
        raise ApiError(f"{name}: Input should be a valid boolean, got {value!r}", param=name)
    return value in TRUE


def generation(form: dict[str, str]) -> GenerationRequest:
    """The form's fields that change what the engine does: the stream, its flattened options, the output limit."""
    stream = flag(form, "stream")
    for option in ("stream_include_usage", "stream_continuous_usage_stats"):
        if flag(form, option) and not stream:
            raise ApiError("Stream options can only be defined when `stream=True`.", param=option)
    if form.get("response_format", "json") != "json":
        raise ApiError("response_format: the simulator answers json only", param="response_format")
    limit = form.get("max_completion_tokens")
    if limit is not None and not (limit.isdigit() and int(limit) > 0):
        raise ApiError("max_completion_tokens: Input should be a positive integer", param="max_completion_tokens")
    return GenerationRequest(
        prompts=[],
        stream=stream,
        include_usage=flag(form, "stream_include_usage"),
        continuous_usage=flag(form, "stream_continuous_usage_stats"),
        max_tokens=int(limit) if limit else None,
        max_tokens_field="max_completion_tokens",
        min_tokens=0,
        ignore_eos=False,
        n=1,
        seed=None,
        stream_interval=None,
        priority=0,
    )


async def read_form(request: web.Request) -> tuple[dict[str, str], bytes]:
    """The form's text fields and its file's bytes; vLLM's refusals of a request without them."""
    if request.content_type != "multipart/form-data":
        raise ApiError("Expected a multipart/form-data body", param="file")
    form = await request.post()
    upload = form.get("file")
    if not isinstance(upload, web.FileField):
        raise ApiError("Expected 'file' to be a file-like object, not 'str'.", param="file")
    fields = {name: value for name, value in form.items() if isinstance(value, str)}
    return fields, upload.file.read()


@dataclass(frozen=True)
class Speech:
    """A speech-to-text request as the engine runs it: the decoder prompt and its output limit, the transcript it
    answers with, the audio's encoder FLOPs and the answer's shape."""

    generation: GenerationRequest
    prompts: list[tuple[list[int], int]]
    reply: Reply
    encoder_flops: float
    api: SpeechApi


async def read_speech(request: web.Request, model: str, profile: Profile) -> Speech:
    """One speech-to-text request: its audio's length, the decoder prompt and transcript for the engine, the audio's
    encoder FLOPs for the step that admits it."""
    task = TASKS[request.path]
    form, data = await read_form(request)
    check_model(form, model)
    seconds = audio_seconds(data)
    request_generation = generation(form)
    prompt = list(DECODER_PROMPT)
    max_tokens = resolve_max_tokens(request_generation, len(prompt), profile.max_model_len, None)
    return Speech(
        request_generation,
        [(prompt, max_tokens)],
        Reply(0, (WORD,) * (transcript_tokens(seconds) - 1)),
        profile.audio_encoder_flops_per_s * seconds,
        SpeechApi(task, seconds, request_generation, request.headers.get(REQUEST_ID_HEADER)),
    )


class SpeechApi:
    """One speech-to-text answer: its ``transcription.chunk`` (or ``translation.chunk``) stream, or its whole body."""

    def __init__(self, task: str, seconds: float, request: GenerationRequest, request_id: str | None) -> None:
        self.task = task
        self.seconds = seconds
        self.include_usage = request.include_usage
        self.continuous_usage = request.continuous_usage
        self.request_id = f"{task}-{request_id}" if request_id else new_request_id(task)  # vLLM's own prefix

    def stream_format(self, model: str, prompt_tokens: int, prompt_details: bool, line_ending: bytes) -> ChunkFormat:
        return SpeechFormat(self, model, prompt_tokens, line_ending)

    def whole(self, model: str, answer: Answer) -> dict:
        """vLLM's TranscriptionResponse (the text and the audio's whole seconds as its usage), or its
        TranslationResponse (the text alone)."""
        if self.task == "translate":
            return {"text": answer.text}
        return {"text": answer.text, "usage": {"type": "duration", "seconds": math.ceil(self.seconds)}}


class SpeechFormat(ChunkFormat):
    """The chunks of one streamed transcript: a delta per output (no role chunk first), the finish reason on the
    last; with stream_include_usage, a usage chunk without choices."""

    def __init__(self, api: SpeechApi, model: str, prompt_tokens: int, line_ending: bytes) -> None:
        super().__init__(False, model, api.continuous_usage, prompt_tokens, line_ending=line_ending)
        self.api = api
        self._head = json_bytes(
            {"id": api.request_id, "object": CHUNK_KINDS[api.task], "created": self.created, "model": model}
        )[:-1]

    def content(self, index: int, text: bytes, finish_reason: str | None, start: int, end: int) -> bytes:
        """A delta (``text`` is JSON string content already); the last one with vLLM's finish and stop reasons."""
        choice = b'{"delta":{"content":"%s"}' % text
        if finish_reason is not None:
            choice += b',"finish_reason":"%s","stop_reason":null' % finish_reason.encode()
        return b'data: %s,"choices":[%s}]%s}\n\n' % (self._head, choice, self._usage(end))

    def usage(self, completion_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0) -> bytes:
        """The usage chunk, when the request asked for it (stream_include_usage)."""
        if not self.api.include_usage:
            return b""
        usage = usage_json(self.prompt_tokens, completion_tokens)
        return b'data: %s,"choices":[],"usage":%s}\n\n' % (self._head, usage)
