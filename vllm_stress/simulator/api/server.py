"""aiohttp application: the routes of ``vllm serve`` over one engine, with its auth, errors and HTTP metrics
(docs/concepts/simulator.md, section 8)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from ..engine.core import Engine
from ..engine.leak import Leak
from ..engine.lora import LoraConfig, LoraSlots, adapter_cards, adapter_request
from ..engine.priority import PRIORITY_HEADER, header_priority
from ..engine.sequence import Sequence
from ..model.answers import AnswerModel, Reply
from ..model.errors import ApiError
from ..model.grammar import json_reply, request_schema
from ..model.profiles import Profile
from ..model.tokenizer import Tokenizer
from ..model.toolcalls import ToolChunks, plan_tool_call
from ..model.vision import message_images
from . import audioapi, legacy, messagesapi, poolingapi, responsesapi
from .connections import Connections
from .connectormetrics import ConnectorMetrics
from .devroutes import DevRoutes
from .driver import EngineDriver
from .httpmetrics import HttpMetrics
from .metrics import EngineMetrics
from .parsing import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    GenerationRequest,
    check_model,
    error_body,
    parse_generation,
    parse_json,
    parse_messages,
    parse_prompts,
    resolve_max_tokens,
)
from .profiler import Profiler
from .protocol import ChunkFormat, Reasoning, chat_response, completion_response, json_bytes, model_list
from .requestlog import REQUEST_ID_HEADER, RequestLog
from .streams import Generator, write_sse
from .typedapi import Answer, ApiFactory, TypedApi

if TYPE_CHECKING:
    from .instance import KvTransfer
    from .spanexport import SpanExporter

VLLM_VERSION = "0.33.0"
AUTH_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
TRACEPARENT_HEADER = "traceparent"  # W3C trace context: the span of a request that carries one is exported
TIMING_KEY = web.RequestKey("timing", object)  # a request's RequestTiming, with --request-log


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=json_bytes(body), status=status, content_type="application/json")


def thinking(body: dict) -> bool:
    """Whether a chat request lets a reasoning model think: not when its ``chat_template_kwargs`` say
    ``"enable_thinking": false`` (the Qwen3 chat template's switch) or ``"thinking": false`` (DeepSeek-V3.1+'s and
    Kimi-K2's)."""
    kwargs = body.get("chat_template_kwargs")
    return not (isinstance(kwargs, dict) and False in (kwargs.get("enable_thinking"), kwargs.get("thinking")))


class Simulator:
    """The state behind the routes: one engine, its driver and metrics, the tokenizer."""

    def __init__(
        self,
        profile: Profile,
        *,
        api_key: str | None = None,
        seed: int = 0,
        time_scale: float = 1.0,
        prompt_details: bool = False,
        request_log: str | None = None,
        reasoning: Reasoning | None = None,
        otlp_traces_endpoint: str | None = None,
        sse_line_ending: bytes = b"\n",
        lora: LoraConfig | None = None,
        accept_cost_s: float = 0.0,
        leak: Leak | None = None,
        profiler_dir: str | None = None,
        dev_mode: bool = False,
        kv_cache_metrics: float | None = None,
    ):
        self.profile = profile
        self.prompt_details = prompt_details  # vllm serve --enable-prompt-tokens-details: usage says cached_tokens
        self.reasoning = reasoning  # a reasoning model (--reasoning-tokens): chat output starts with its thinking
        self.sse_line_ending = sse_line_ending  # --sse-line-ending: how streamed events end their lines
        self.model = profile.served_model_name
        self.api_key = api_key
        self.created = int(time.time())
        self.tokenizer = Tokenizer()
        self.engine = Engine(profile, seed=seed)
        self.engine.leak = leak
        if kv_cache_metrics is not None:  # --kv-cache-metrics, this share of the cached blocks (residency.py)
            self.engine.track_residency(kv_cache_metrics, seed)
        self.lora_modules: dict[str, str] = {}  # served adapters: name -> path (--enable-lora; lora.py)
        if lora:
            self.engine.lora = LoraSlots(lora, profile)
            for name in lora.modules:  # vLLM loads --lora-modules into its host cache at startup
                self._load_adapter(name, lora.modules[name])
            self.engine.lora.pending_s = 0.0
        cache_info = {
            "block_size": str(profile.block_size),
            "gpu_memory_utilization": str(profile.gpu_memory_utilization),
            "num_gpu_blocks": str(self.engine.kv.num_blocks),
            "enable_prefix_caching": str(profile.enable_prefix_caching),
            "kv_offloading_size": str(profile.kv_offloading_size or None),
        }
        self.metrics = EngineMetrics(self.engine, self.model, cache_info)
        self.registry = self.metrics.registry()
        self.http_metrics = HttpMetrics()
        self.registry.register(self.http_metrics)
        self.driver = EngineDriver(self.engine, self.metrics, time_scale)
        self.generator = Generator(profile, self.driver, seed)
        self.answers = AnswerModel(profile)
        self.request_log = RequestLog(request_log) if request_log else None
        self.connections = Connections(accept_cost_s, self.request_log.accepted if self.request_log else None)
        self.registry.register(self.connections)
        self.spans: SpanExporter | None = None
        if otlp_traces_endpoint:
            # imported on first use (docs/contributing.md, "Imports")
            from .spanexport import SpanExporter

            self.spans = SpanExporter(otlp_traces_endpoint, time_scale)
        self.connector: KvTransfer | None = None  # a P/D instance's side of the KV transfer (disagg.py)
        self.profiler = Profiler(profiler_dir, self.engine) if profiler_dir else None  # --profiler-dir
        self.dev_routes = DevRoutes(self.engine) if dev_mode else None  # --dev-mode
        self.connector_metrics = ConnectorMetrics(self.engine.kv, self.model) if self.engine.kv.host else None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/v1/embeddings", self.embeddings)
        for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
            app.router.add_post(path, self.rerank)
        app.router.add_post("/score", self.score)
        app.router.add_post("/v1/score", self.score)
        for path in audioapi.TASKS:
            app.router.add_post(path, self.speech)
        app.router.add_get("/v1/models", self.models)
        if self.engine.lora:
            app.router.add_post("/v1/load_lora_adapter", self.load_lora_adapter)
            app.router.add_post("/v1/unload_lora_adapter", self.unload_lora_adapter)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/load", self.load)
        app.router.add_get("/metrics", self.metrics_text)
        app.router.add_post("/generate", self.generate)
        if self.profiler:  # vllm serve has the routes only with a profiler configured
            self.profiler.attach(app)
        if self.dev_routes:  # vllm serve has them only with VLLM_SERVER_DEV_MODE=1
            self.dev_routes.attach(app)
        if self.connector_metrics:  # a CPU tier: its own counters, as LMCache's API server has them
            self.connector_metrics.attach(app)
        app.on_startup.append(self._start_engine)
        app.on_cleanup.append(self._stop_engine)
        return app

    async def _start_engine(self, _app: web.Application) -> None:
        self.driver.start()
        if self.spans:
            self.spans.start()

    async def _stop_engine(self, _app: web.Application) -> None:
        await self.driver.stop()
        if self.spans:
            await self.spans.stop()
        if self.request_log:
            self.request_log.close()

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        if self.request_log:
            request[TIMING_KEY] = self.request_log.timing(request.headers, request.transport, request.path)
        response = await self._respond(request, handler)
        resource = request.match_info.route.resource
        if resource is not None:
            response_bytes = response.body_length if response.prepared else response.content_length or 0
            self.http_metrics.observe(
                resource.canonical,
                request.method,
                response.status,
                request.content_length or 0,
                response_bytes,
                time.perf_counter() - started,
            )
        return response

    async def _respond(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.api_key and request.path.startswith(AUTH_PREFIXES):
            if request.headers.get("Authorization") != f"Bearer {self.api_key}":
                return _json({"error": "Unauthorized"}, status=401)
        try:
            return await handler(request)
        except ApiError as error:
            return web.Response(body=error_body(error), status=error.status, content_type="application/json")
        except web.HTTPNotFound:
            return _json({"detail": "Not Found"}, status=404)
        except web.HTTPMethodNotAllowed:
            return _json({"detail": "Method Not Allowed"}, status=405)

    def _adapter(self, body: dict) -> str:
        """The served LoRA adapter a request names as its model, "" for the base model; 404 for another name."""
        model = body.get("model")
        if isinstance(model, str) and model in self.lora_modules:
            return model
        check_model(body, self.model)
        return ""

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._chat(request, parse_json(await request.read()))

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's Responses API: a chat request answered in its events (responsesapi.py)."""
        body = parse_json(await request.read())
        chat = responsesapi.chat_body(body)
        return await self._chat(request, chat, responsesapi.ResponsesApi)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """Anthropic's Messages API: a chat request answered in its events (messagesapi.py)."""
        chat = messagesapi.chat_body(parse_json(await request.read()))
        return await self._chat(request, chat, lambda _max_tokens: messagesapi.MessagesApi())

    async def _chat(self, request: web.Request, body: dict, api: ApiFactory | None = None) -> web.StreamResponse:
        """A chat request's answer; ``api(max_tokens)`` gives another API's events and body for it."""
        adapter = self._adapter(body)
        messages = parse_messages(body)
        generation = parse_generation(body, [messages])
        images = message_images(body, self.profile)
        token_ids = self.tokenizer.chat_encode(messages, images=images)
        max_tokens = resolve_max_tokens(generation, len(token_ids), self.profile.max_model_len, None)
        reply = None
        if call := plan_tool_call(body, generation.seed or 0):  # a tool call's answer, without reasoning
            reply = call.reply
        elif (schema := request_schema(body)) is not None:
            reply = json_reply(schema, max_tokens)
        elif not generation.ignore_eos and not generation.min_tokens:
            reply = self.answers.reply(messages, generation.seed or 0, self.driver.load)
        reasoning = self.reasoning if thinking(body) and not call else None
        if (timing := request.get(TIMING_KEY)) is not None:
            timing.messages = body["messages"]
        encoder_flops = sum(image.encoder_flops for message in images for image in message)
        return await self._generate(
            request,
            generation,
            [(token_ids, max_tokens)],
            chat=True,
            reply=reply,
            reasoning=reasoning,
            encoder_flops=encoder_flops,
            kv_params=body.get("kv_transfer_params"),
            adapter=adapter,
            tools=ToolChunks(call) if call else None,
            api=api(max_tokens) if api else None,
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = parse_json(await request.read())
        adapter = self._adapter(body)
        generation = parse_generation(body, parse_prompts(body))
        prompts = []
        for prompt in generation.prompts:
            token_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
            max_tokens = resolve_max_tokens(
                generation, len(token_ids), self.profile.max_model_len, COMPLETIONS_DEFAULT_MAX_TOKENS
            )
            prompts.append((token_ids, max_tokens))
        schema = request_schema(body)
        reply = None if schema is None else json_reply(schema, prompts[0][1])
        return await self._generate(
            request,
            generation,
            prompts,
            chat=False,
            kv_params=body.get("kv_transfer_params"),
            adapter=adapter,
            reply=reply,
        )

    async def embeddings(self, request: web.Request) -> web.Response:
        """vLLM's embeddings API: an embedding per input (poolingapi.py)."""
        body = parse_json(await request.read())
        check_model(body, self.model)
        prompts = poolingapi.embedding_prompts(body, self.tokenizer)
        await self._pool(request, body, prompts)
        return _json(poolingapi.embeddings_response(self.model, prompts, body.get("encoding_format") or "float"))

    async def rerank(self, request: web.Request) -> web.Response:
        """vLLM's rerank API (Jina's and Cohere's shape): a query's documents by relevance (poolingapi.py)."""
        body = parse_json(await request.read())
        check_model(body, self.model)
        query, documents = poolingapi.rerank_pairs(body)
        prompts = [poolingapi.pair_ids(self.tokenizer, query, document) for document in documents]
        await self._pool(request, body, prompts)
        return _json(poolingapi.rerank_response(self.model, documents, prompts, body.get("top_n")))

    async def score(self, request: web.Request) -> web.Response:
        """vLLM's score API: text_1 against text_2, a score per pair (poolingapi.py)."""
        body = parse_json(await request.read())
        check_model(body, self.model)
        pairs = poolingapi.score_pairs(body)
        prompts = [poolingapi.pair_ids(self.tokenizer, first, second) for first, second in pairs]
        await self._pool(request, body, prompts)
        return _json(poolingapi.score_response(self.model, prompts))

    async def _pool(self, request: web.Request, body: dict, prompts: list[list[int]]) -> None:
        """Run a pooling request's prompts on the engine, each a prefill-only sequence (max_tokens 0), and log it
        like any other request (its sequences' prompt tokens, no output)."""
        limit = self.profile.max_model_len
        if too_long := [len(ids) for ids in prompts if len(ids) > limit]:
            raise ApiError(f"This model's maximum context length is {limit} tokens, an input has {too_long[0]}")
        priority = body["priority"] if isinstance(body.get("priority"), int) else 0
        stream = self.generator.start(
            [(token_ids, 0) for token_ids in prompts],
            1,
            seed=None,
            min_tokens=0,
            ignore_eos=True,
            interval=1,
            streaming=False,
            priority=header_priority(request.headers.get(PRIORITY_HEADER), priority),
        )
        if (timing := request.get(TIMING_KEY)) is not None:
            timing.model, timing.inputs = self.model, len(prompts)
        try:
            await stream.wait_finished()
        finally:
            self.driver.abort(stream.seqs)
            self._record(request, stream.seqs[0], sum(map(len, prompts)))

    async def speech(self, request: web.Request) -> web.StreamResponse:
        """vLLM's speech-to-text APIs: a multipart form run on the same engine (audioapi.py)."""
        speech = await audioapi.read_speech(request, self.model, self.profile)
        return await self._generate(
            request,
            speech.generation,
            speech.prompts,
            chat=False,
            reply=speech.reply,
            encoder_flops=speech.encoder_flops,
            api=speech.api,
        )

    async def _generate(
        self,
        request: web.Request,
        generation: GenerationRequest,
        prompts: list[tuple[list[int], int]],
        chat: bool,
        reply: Reply | None = None,
        reasoning: Reasoning | None = None,
        encoder_flops: float = 0.0,
        kv_params: object = None,
        adapter: str = "",
        tools: ToolChunks | None = None,
        api: TypedApi | None = None,
    ) -> web.StreamResponse:
        model = adapter or self.model  # vLLM answers with the adapter's name
        interval = max(generation.stream_interval or 1, self.profile.stream_interval)
        prompt_tokens = sum(len(token_ids) for token_ids, _ in prompts)
        external = await self.connector.receive(kv_params, prompt_tokens) if self.connector else None
        stream = self.generator.start(
            prompts,
            generation.n,
            seed=generation.seed,
            min_tokens=generation.min_tokens,
            ignore_eos=generation.ignore_eos,
            interval=interval,
            streaming=generation.stream,
            reply=reply,
            encoder_flops=encoder_flops,
            external=external,
            adapter=adapter,
            priority=header_priority(request.headers.get(PRIORITY_HEADER), generation.priority),
        )
        timing = request.get(TIMING_KEY)
        if timing is not None:
            timing.model = model
        try:
            if generation.stream and api:
                typed = api.stream_format(model, prompt_tokens, self.prompt_details, self.sse_line_ending)
                return await write_sse(request, stream, typed, True, timing)
            if generation.stream:
                fmt = ChunkFormat(
                    chat,
                    model,
                    generation.continuous_usage,
                    prompt_tokens,
                    self.prompt_details,
                    reasoning,
                    self.sse_line_ending,
                )
                fmt.tools = tools
                return await write_sse(request, stream, fmt, generation.include_usage, timing)
            await stream.wait_finished()
        finally:
            self.driver.abort(stream.seqs)
            if timing is not None and timing.messages is not None:
                timing.answer = stream.full_text(0)
                timing.tool_call = {"id": tools.call_id, "name": tools.call.name} if tools else None
            self._record(request, stream.seqs[0], prompt_tokens)
        choices = [(stream.full_text(index), reason) for index, reason in enumerate(stream.reasons)]
        build = chat_response if chat else completion_response
        cached = stream.cached_tokens if self.prompt_details else None
        if api:
            return _json(api.whole(model, Answer(*choices[0], prompt_tokens, stream.completion_tokens, cached)))
        body = build(model, choices, prompt_tokens, stream.completion_tokens, cached)
        if self.connector and (produced := self.connector.produced(kv_params, prompt_tokens)):
            body["kv_transfer_params"] = produced  # as vLLM's response carries a KV connector's parameters
        if tools is not None:
            for choice in body["choices"]:
                choice["message"] = tools.message(choice["message"])
                choice["finish_reason"] = tools.call.finish_reason(choice["finish_reason"])
        return _json(body)

    def _record(self, request: web.Request, seq: Sequence, prompt_tokens: int) -> None:
        """The finished request in the request log and as a span (its first sequence's engine times)."""
        timing = request.get(TIMING_KEY)
        if timing and self.request_log:
            timing.finish_reason = seq.finish_reason
            if seq.first_scheduled is not None:
                timing.queue = seq.queue_time() / self.driver.time_scale
            timing.prompt_tokens, timing.completion_tokens = prompt_tokens, seq.num_output
            timing.cached_tokens = seq.num_cached_tokens
            self.request_log.write(timing)
        if self.spans and (parent := request.headers.get(TRACEPARENT_HEADER)):
            request_id = request.headers.get(REQUEST_ID_HEADER, "")
            self.spans.add(parent, request_id, seq, self.driver.engine_now(), prompt_tokens)

    async def models(self, _request: web.Request) -> web.Response:
        models = model_list(self.model, self.profile.model_path, self.profile.max_model_len, self.created)
        return _json(adapter_cards(models, self.lora_modules, self.model))

    def _load_adapter(self, name: str, path: str) -> None:
        if self.engine.lora:
            self.lora_modules[name] = path
            self.engine.lora.load(name)

    async def load_lora_adapter(self, request: web.Request) -> web.Response:
        name, path = adapter_request(parse_json(await request.read()), self.lora_modules, self.model, loading=True)
        self._load_adapter(name, path)
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_lora_adapter(self, request: web.Request) -> web.Response:
        name, _ = adapter_request(parse_json(await request.read()), self.lora_modules, self.model, loading=False)
        del self.lora_modules[name]
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def tokenize(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        check_model(body, self.model)
        if "messages" in body:
            messages, images = parse_messages(body), message_images(body, self.profile)
            generation_prompt = body.get("add_generation_prompt", True) is not False
            tokens = self.tokenizer.chat_encode(messages, generation_prompt, images, expand_images=False)
        elif isinstance(body.get("prompt"), str):
            tokens = self.tokenizer.encode(body["prompt"], body.get("add_special_tokens", True) is not False)
        else:
            raise ApiError("body: either 'prompt' (a string) or 'messages' is required", param="prompt")
        strings = [self.tokenizer.token_text(t) for t in tokens] if body.get("return_token_strs") else None
        return _json(
            {"count": len(tokens), "max_model_len": self.profile.max_model_len, "tokens": tokens, "token_strs": strings}
        )

    async def detokenize(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        check_model(body, self.model)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ApiError("body.tokens: Input should be a valid list of integers", param="tokens")
        try:
            return _json({"prompt": self.tokenizer.decode(tokens)})
        except ValueError as error:
            raise ApiError(str(error), param="tokens") from None

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, _request: web.Request) -> web.Response:
        twin = {"source": self.profile.twin_source, "error": self.profile.twin_error}
        return _json({"version": VLLM_VERSION} | ({"twin": twin} if self.profile.twin_source else {}))

    async def load(self, _request: web.Request) -> web.Response:
        return _json({"server_load": self.driver.load})

    async def metrics_text(self, _request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(self.registry))
        response.headers["Content-Type"] = CONTENT_TYPE_PLAIN_0_0_4
        return response

    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await legacy.generate(request, self)
