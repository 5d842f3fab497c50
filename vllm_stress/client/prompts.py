"""Requests of exact token lengths for the target server, sized with its ``/tokenize``; datasets of prompts."""

from __future__ import annotations

import argparse
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import requests

from vllm_stress.client.canary import Canary
from vllm_stress.client.datafile import records
from vllm_stress.client.hitrate import SharedBlocks
from vllm_stress.client.hubdataset import local_paths
from vllm_stress.client.images import DEFAULT_IMAGE_POOL, ImageSet, make_image_set, message_content
from vllm_stress.client.sharegpt import is_sharegpt, read_conversations
from vllm_stress.client.sourceaddr import SOURCES
from vllm_stress.client.structured import JsonSchema
from vllm_stress.client.video import DEFAULT_VIDEO_FRAMES, VideoSet, fps_fields, make_video_set
from vllm_stress.client.workingset import LIVE
from vllm_stress.core.workingset import sweep_contexts

if TYPE_CHECKING:  # deploy/tiny_model.py reads WORDS where gevent is not installed
    from vllm_stress.client.trace import TraceLine

log = logging.getLogger(__name__)

# Common English words; most tokenizers keep each (with its leading space) as one token.
WORDS = """
the of and to in is was for on that with as by at from his her they this be are have had not but which one
were all their there been has when who will more would out so can said what about time up into some them
other than then now only its over also new after first two may any these like could our man made down way
well year back even must through long where much good still should own just those people great old same
world day house work life under never home while last might city found water since place three against
around again small often four left high both part name light country late hand state order high end point
city sea line music plan mind night open green river story paper house road group table field power door
town heart book story word fire earth cloud rain hill stone tree bird song sound voice color morning garden
window market summer winter spring autumn island valley forest ocean bridge street corner village castle
""".split()
WORDS = list(dict.fromkeys(WORDS))  # unique, order kept

CHAT_OVERHEAD_GUESS = 10  # a typical chat template around one user message, when /tokenize is missing
MAX_SIZING_CALLS = 200
PREFIX_PIECE_WORDS = 256  # --prefix-hit-rate: a group's prefix grows by pieces of this many words
DATASET_SAMPLE_SEED = 0  # vllm bench serve samples its datasets with --seed, 0 by default


@dataclass
class RequestSpec:
    """One request to send: its content and what it is built to be."""

    text: str  # the user message (chat) or the prompt (completions, generate)
    target_prompt_tokens: int | None  # None when the length is unknown (dataset without /tokenize)
    max_tokens: int
    prefix_group: int | None = None  # the shared prefix it opens with (--prefix-tokens, --prefix-hit-rate), else None
    shared_prefix_tokens: int | None = None  # --prefix-hit-rate: its leading tokens built to be shared, whole blocks
    images: tuple[str, ...] = ()  # data URLs sent with the chat message (--images)
    image_tokens: int = 0  # the prompt tokens they add (in target_prompt_tokens), measured on the server
    videos: tuple[str, ...] = ()  # data URLs of JPEG-frame videos sent with the chat message (--videos)
    video_tokens: int = 0  # the prompt tokens they add (in target_prompt_tokens), measured on the server
    video_fps: float | None = None  # the frame rate the server is told (--video-fps), None: its default
    canary: Canary | None = None  # a correctness canary (--canary-share): a fixed prompt at temperature 0, seeded
    json_schema: JsonSchema | None = None  # the structured output it asks for (--json-schema), else None
    trace_blocks: int | None = None  # --trace, --session-trace: the hash ids (KV blocks) its prompt was made of
    trace_reused_blocks: int | None = None  # --session-trace: of those, the ones an earlier turn of its session had
    session_turns: int | None = None  # --session-trace: the turns of its recorded session


class Tokenizer:
    """Counts tokens the way the target server does, through its ``/tokenize`` endpoint."""

    def __init__(self, base_url: str, model: str, headers: dict, chat: bool, verify: bool = True) -> None:
        self.url = base_url.rstrip("/") + "/tokenize"
        self.session = SOURCES.http_session()  # its connections leave from where the users' do (--source-addresses)
        self.model = model
        self.headers = headers
        self.chat = chat
        self.verify = verify
        self.calls = 0

    def count(self, text: str) -> int:
        if self.chat:
            return self.count_messages([{"role": "user", "content": text}])
        return self.post({"prompt": text})

    def head_tokens(self) -> int:
        """Tokens the chat template (or the BOS token) puts before the text, the same in every prompt: the common
        start of two one-word prompts' token ids."""
        first, second = (self.token_ids(word) for word in WORDS[:2])
        return next((n for n, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), len(first))

    def token_ids(self, text: str) -> list[int]:
        body = {"messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
        return [int(token) for token in self.tokenize(body if self.chat else {"prompt": text})["tokens"]]

    def count_messages(self, messages: list[dict]) -> int:
        """Tokens of a chat request with these messages, chat template and generation prompt included."""
        return self.post({"messages": messages, "add_generation_prompt": True})

    def post(self, body: dict) -> int:
        return int(self.tokenize(body)["count"])

    def tokenize(self, body: dict) -> dict:
        """The server's /tokenize answer for ``body``: its ``count`` and ``tokens``."""
        self.calls += 1
        if self.model:
            body["model"] = self.model
        resp = self.session.post(self.url, json=body, headers=self.headers, timeout=30, verify=self.verify)
        resp.raise_for_status()
        answer: dict = resp.json()
        return answer

    def image_tokens(self, text: str, images: tuple[str, ...]) -> int:
        """The prompt tokens ``images`` add to a chat message of ``text``: one generation of one token with them, its
        usage.prompt_tokens less the text's /tokenize count. (vLLM's /tokenize counts an image as its placeholder,
        not the tokens its processor expands it to.)"""
        return self.media_tokens(text, message_content(text, images), {})

    def video_tokens(self, text: str, videos: VideoSet) -> int:
        """The prompt tokens a request's draw of ``videos`` adds to a chat message of ``text``, measured as images'."""
        content = message_content(text, (), videos.draw(random.Random(0)))
        return self.media_tokens(text, content, fps_fields(videos.fps))

    def media_tokens(self, text: str, content: str | list[dict], fields: dict) -> int:
        """A one-token generation's usage.prompt_tokens for a message of ``content`` (and ``fields``), less the
        /tokenize count of ``text`` alone."""
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1} | fields
        if self.model:
            body["model"] = self.model
        url = self.url.removesuffix("/tokenize") + "/v1/chat/completions"
        resp = self.session.post(url, json=body, headers=self.headers, timeout=120, verify=self.verify)
        resp.raise_for_status()
        return int(resp.json()["usage"]["prompt_tokens"]) - self.count(text)


def block_words(hash_id: int, words: list[str], tokens: int, salt: str = "") -> list[str]:
    """The words of one trace block of ``tokens`` tokens: the same on every worker for the same id and ``salt`` (a
    session replayed again gets a new salt, so new words)."""
    return random.Random(f"block-{salt}{hash_id}").choices(words, k=tokens)


def single_token_words(tokenizer: Tokenizer, words: list[str], overhead: int) -> list[str]:
    """The words that the tokenizer keeps as one token each (bisecting groups that are not)."""
    if tokenizer.calls >= MAX_SIZING_CALLS:
        return []
    if tokenizer.count(" ".join(words)) - overhead == len(words):
        return words
    if len(words) == 1:
        return []
    half = len(words) // 2
    return single_token_words(tokenizer, words[:half], overhead) + single_token_words(tokenizer, words[half:], overhead)


class Workload:
    """Draws the requests of one worker: prompt words and output lengths around the targets."""

    def __init__(
        self,
        input_tokens: int,
        output_tokens: int,
        dist: str = "fixed",
        spread: float = 0.0,
        words: list[str] | None = None,
        overhead: int = 0,
        exact: bool = True,
        dataset: list[RequestSpec] | None = None,
        seed: int | None = None,
        prefix_tokens: int = 0,
        prefix_groups: int = 1,
        images: ImageSet | None = None,
        reasoning_budget: int = 0,
        shared: SharedBlocks | None = None,
        videos: VideoSet | None = None,
    ) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.reasoning_budget = reasoning_budget  # decode tokens for a reasoning model's thinking (--reasoning-budget)
        self.dist = dist
        self.spread = spread
        self.words = words or WORDS
        self.overhead = overhead
        self.exact = exact
        self.dataset = dataset
        self.rng = random.Random(seed)
        self.images = images
        self.videos = videos
        self.prefixes = (
            [
                " ".join(random.Random(f"prefix-{group}").choices(self.words, k=prefix_tokens))
                for group in range(prefix_groups)
            ]
            if prefix_tokens
            else []
        )
        self.shared = shared  # --prefix-hit-rate: each prompt's shared blocks
        self.prefix_groups = prefix_groups
        self.group_words: dict[int, list[str]] = {}  # --prefix-hit-rate: each group's prefix, as long as used

    def output_length(self) -> int:
        """A request's max_tokens: an answer drawn around --output-tokens and the --reasoning-budget for thinking."""
        return self.length(self.output_tokens) + self.reasoning_budget

    def length(self, target: int) -> int:
        """A length drawn around ``target`` by the configured distribution (at least 1)."""
        if self.dist == "uniform" and self.spread:
            low, high = round(target * (1 - self.spread)), round(target * (1 + self.spread))
            return max(1, self.rng.randint(low, high))
        if self.dist == "normal" and self.spread:
            return max(1, round(self.rng.gauss(target, target * self.spread)))
        return target

    def prompt(self, tokens: int, rng: random.Random | None = None, group: int | None = None) -> str:
        """Words making ``tokens`` prompt tokens with the overhead (as close as the overhead allows): one of the
        shared prefixes (``group``, or drawn), if any, then random words (drawn from ``rng``, default the
        workload's)."""
        rng = rng or self.rng
        prefix = self.prefixes[rng.randrange(len(self.prefixes)) if group is None else group] if self.prefixes else ""
        random_words = max(1, tokens - self.overhead - len(prefix.split()))
        return " ".join(filter(None, (prefix, *rng.choices(self.words, k=random_words))))

    def trace_request(self, line: TraceLine, block_tokens: int | None = None, salt: str = "") -> RequestSpec:
        """The request of a trace line: its lengths; with hash ids, a prompt of those blocks' words (``block_tokens``
        words each, --trace-block-size; None: the trace format's own), the rest random."""
        count = max(1, line.input_tokens - self.overhead)
        size = block_tokens or line.block_tokens
        blocks = (block_words(hash_id, self.words, size, salt) for hash_id in line.hash_ids)
        words = [word for block in blocks for word in block][:count]
        words += self.rng.choices(self.words, k=count - len(words))
        target = max(line.input_tokens, self.overhead + 1)
        spec = RequestSpec(" ".join(words), target, max(1, line.output_tokens), trace_blocks=len(line.hash_ids) or None)
        return self.with_images(spec)

    def next_request(self) -> RequestSpec:
        max_tokens = self.output_length()
        if self.dataset:
            spec = self.rng.choice(self.dataset)
            answer = spec.max_tokens and spec.max_tokens + self.reasoning_budget  # the dataset's answer length, if any
            return self.with_images(RequestSpec(spec.text, spec.target_prompt_tokens, answer or max_tokens))
        tokens = self.length(self.input_tokens)
        if self.shared:
            return self.with_images(self.shared_request(tokens, self.shared, max_tokens))
        group = self.next_group()
        return self.with_images(
            RequestSpec(self.prompt(tokens, group=group), max(tokens, self.overhead + 1), max_tokens, group)
        )

    def next_group(self) -> int | None:
        """The shared prefix of the next prompt (None without --prefix-tokens): in a working-set sweep, its level's
        contexts in turn (vllm_stress.client.workingset); else one drawn."""
        if not self.prefixes:
            return None
        swept = LIVE.next_group()
        return self.rng.randrange(len(self.prefixes)) if swept is None else swept

    def shared_request(self, tokens: int, shared: SharedBlocks, max_tokens: int) -> RequestSpec:
        """A prompt of ``tokens`` tokens opening with as many blocks of a drawn group's prefix as ``shared`` plans
        (--prefix-hit-rate), then random words from a block boundary on."""
        group = self.rng.randrange(self.prefix_groups)
        shared_tokens = shared.shared_tokens(tokens)
        prefix = self.prefix_of(group, shared.prefix_words(shared_tokens))
        words = [*prefix, *self.rng.choices(self.words, k=max(1, tokens - self.overhead - len(prefix)))]
        return RequestSpec(" ".join(words), max(tokens, self.overhead + 1), max_tokens, group, shared_tokens)

    def prefix_of(self, group: int, count: int) -> list[str]:
        """The first ``count`` words of ``group``'s prefix: the same on every worker (seeded by the group)."""
        words = self.group_words.setdefault(group, [])
        while len(words) < count:  # in pieces seeded by their place, so every worker grows the same words
            piece = len(words) // PREFIX_PIECE_WORDS
            words += random.Random(f"shared-prefix-{group}-{piece}").choices(self.words, k=PREFIX_PIECE_WORDS)
        return words[:count]

    def with_images(self, spec: RequestSpec) -> RequestSpec:
        """``spec`` with the workload's images drawn, their tokens added to its target (``--images``); then its
        videos (``--videos``)."""
        if not self.images:
            return self.with_videos(spec)
        target = None if spec.target_prompt_tokens is None else spec.target_prompt_tokens + self.images.tokens
        images = self.images.draw(self.rng)
        return self.with_videos(
            replace(spec, target_prompt_tokens=target, images=images, image_tokens=self.images.tokens)
        )

    def with_videos(self, spec: RequestSpec) -> RequestSpec:
        """``spec`` with the workload's videos drawn, their tokens added to its target (``--videos``)."""
        if not self.videos:
            return spec
        videos, tokens = self.videos.draw(self.rng), self.videos.tokens
        target = None if spec.target_prompt_tokens is None else spec.target_prompt_tokens + tokens
        return replace(spec, target_prompt_tokens=target, videos=videos, video_tokens=tokens, video_fps=self.videos.fps)


def load_dataset(dataset: str, num_prompts: int = 0) -> list[RequestSpec]:
    """The prompts of a JSONL or Parquet file (``prompt`` or ``messages`` records, optional ``max_tokens``) or of a
    ShareGPT file (each conversation's first human turn), or of a Hub dataset's files (``hf:ORG/NAME``, downloaded
    once per process: client/hubdataset.py); with ``num_prompts`` (> 0) the same seeded sample in every process."""
    return sample_dataset(read_dataset(dataset), num_prompts)


def sample_dataset(items: list, num_prompts: int) -> list:
    """A seeded sample of ``num_prompts`` of a dataset's items, in file order (all of them for 0 or more): the same
    items in every process, so every worker sizes and sends the same prompts."""
    if not 0 < num_prompts < len(items):
        return items
    return [items[index] for index in sorted(random.Random(DATASET_SAMPLE_SEED).sample(range(len(items)), num_prompts))]


def read_dataset(dataset: str) -> list[RequestSpec]:
    """The prompts of --dataset's files, one after the other (a Hub dataset's may be several)."""
    paths = local_paths(dataset)
    if is_sharegpt(paths[0]):
        return [RequestSpec(turns[0], None, 0) for turns in read_conversations(*paths)]
    specs = [prompt_spec(place, item) for path in paths for place, item in records(path)]
    if not specs:
        raise ValueError(f"{dataset}: no prompts in the file" + ("s" if len(paths) > 1 else ""))
    return specs


def prompt_spec(place: str, item: Any) -> RequestSpec:
    """A dataset record's prompt: its ``prompt``, or its ``messages``' contents joined, and its ``max_tokens`` (a
    Parquet table's rows have every column: an empty one is None)."""
    try:
        prompt = item.get("prompt")
        text = prompt if prompt is not None else "\n".join(m["content"] for m in item["messages"])
        return RequestSpec(text, None, int(item.get("max_tokens") or 0))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{place}: not a prompt record ({type(e).__name__}: {e})") from None


def size_dataset(tokenizer: Tokenizer, specs: list[RequestSpec]) -> list[RequestSpec]:
    """The dataset with each prompt's token count measured by the server."""
    return [RequestSpec(s.text, tokenizer.count(s.text), s.max_tokens) for s in specs]


def build_workload(tokenizer: Tokenizer, options: argparse.Namespace, seed: int | None = None) -> Workload:
    """Measure the target's tokenizer and return the worker's workload; falls back to estimates without /tokenize."""
    dataset = load_dataset(options.dataset, options.num_prompts) if options.dataset else None
    common = dict(
        input_tokens=options.input_tokens,
        output_tokens=options.output_tokens,
        dist=options.token_dist,
        spread=options.token_spread,
        seed=seed,
        prefix_tokens=getattr(options, "prefix_tokens", 0),
        prefix_groups=max(
            [getattr(options, "prefix_groups", 1), *(sweep_contexts(getattr(options, "shape", "")) or [])]
        ),
        images=image_set(options, seed) if tokenizer.chat else None,
        videos=video_set(options, seed) if tokenizer.chat else None,
        reasoning_budget=getattr(options, "reasoning_budget", 0) if tokenizer.chat else 0,
    )
    try:
        overhead = tokenizer.count("")
        if dataset:
            workload = Workload(dataset=size_dataset(tokenizer, dataset), overhead=overhead, **common)
            measure_images(tokenizer, workload)
            return workload
        words = single_token_words(tokenizer, WORDS, overhead)
        if len(words) < 20:
            raise ValueError(f"only {len(words)} single-token words found")
        shared = shared_blocks(options, tokenizer.head_tokens, overhead)
        workload = Workload(words=words, overhead=overhead, shared=shared, **common)
        check_length(tokenizer, workload)
        measure_images(tokenizer, workload)
        return workload
    except (requests.RequestException, ValueError, KeyError) as e:
        log.warning("=" * 100)
        log.warning("PROMPT LENGTHS ARE ESTIMATES: sizing with %s failed (%s).", tokenizer.url, e)
        log.warning("Token counts are still checked against each response's usage.")
        log.warning("=" * 100)
        overhead = CHAT_OVERHEAD_GUESS if tokenizer.chat else 1
        shared = shared_blocks(options, lambda: 0, overhead)
        return Workload(dataset=dataset, overhead=overhead, exact=False, shared=shared, **common)


def shared_blocks(options: argparse.Namespace, measure_head: Callable[[], int], overhead: int) -> SharedBlocks | None:
    """--prefix-hit-rate's plan of shared blocks (None without it, and then ``measure_head``, a /tokenize call, is not
    made), the template's head tokens measured."""
    rate = getattr(options, "prefix_hit_rate", None)
    if rate is None:
        return None
    head = measure_head()
    shared = SharedBlocks(rate, options.kv_block_size, head, overhead - head)
    tokens = options.input_tokens
    if not shared.reachable(tokens):
        log.warning(
            "--prefix-hit-rate %g cannot be made with %d-token prompts: each shares %.3f to %.3f of its tokens (the "
            "chat template's %d leading tokens always, the last block never)",
            rate,
            tokens,
            shared.fewest() / tokens,
            shared.most(tokens) / tokens,
            head,
        )
    return shared


def image_set(options: argparse.Namespace, seed: int | None) -> ImageSet | None:
    """The images of ``--images`` (None without): made here, before the run, so no request waits for an encoder."""
    per_request = getattr(options, "images", 0)
    if not per_request:
        return None
    pool = getattr(options, "image_pool", DEFAULT_IMAGE_POOL)
    return make_image_set(per_request, options.image_size, options.image_format, pool, f"images-{seed}")


def video_set(options: argparse.Namespace, seed: int | None) -> VideoSet | None:
    """The videos of ``--videos`` (None without): made here, before the run, like the images."""
    per_request = getattr(options, "videos", 0)
    if not per_request:
        return None
    frames = getattr(options, "video_frames", DEFAULT_VIDEO_FRAMES)
    return make_video_set(per_request, frames, options.video_size, options.video_fps, f"videos-{seed}")


def measure_images(tokenizer: Tokenizer, workload: Workload) -> None:
    """Set the prompt tokens the workload's images and videos add, measured once on the server (all its images have
    one size, all its videos one size and frame count, so every request's add as many)."""
    if workload.images:
        text = workload.next_request().text
        workload.images.tokens = tokenizer.image_tokens(text, workload.images.draw(workload.rng))
        log.info("%d images add %d prompt tokens to each request", workload.images.per_request, workload.images.tokens)
    if workload.videos:
        workload.videos.tokens = tokenizer.video_tokens(workload.next_request().text, workload.videos)
        log.info("%d videos add %d prompt tokens to each request", workload.videos.per_request, workload.videos.tokens)


def check_length(tokenizer: Tokenizer, workload: Workload) -> None:
    """Check one full-length prompt end to end; warn when the server counts it differently."""
    counted = tokenizer.count(workload.prompt(workload.input_tokens))
    if counted != workload.input_tokens:
        log.warning(
            "A %d-token prompt measured %d tokens on the server: lengths will be off by about %d",
            workload.input_tokens,
            counted,
            counted - workload.input_tokens,
        )
