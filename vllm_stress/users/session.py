"""Locustfile: multi-turn chat sessions, each Locust user one conversation at a time.

locust -f locustfiles/session.py -H http://127.0.0.1:8000 --headless -u 10 -t 2m --turns 4 --think-time 2"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import random
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gevent
import requests
from locust import task
from locust.exception import StopUser

from vllm_stress.client.affinity import echoes_cookie
from vllm_stress.client.checks import StopTarget
from vllm_stress.client.conversation import Conversation, TurnSizer, assistant_message, think_time, user_message
from vllm_stress.client.exchange import Exchange
from vllm_stress.client.hubdataset import local_paths
from vllm_stress.client.pacing import OpenLoopArrivals
from vllm_stress.client.pools import new_session
from vllm_stress.client.prompts import RequestSpec, Tokenizer, Workload, sample_dataset
from vllm_stress.client.sessionmodel import RecordedSession, most_in_flight
from vllm_stress.client.sessiontrace import (
    SessionDeck,
    capped_gap,
    deck_for,
    parse_start_share,
    read_sessions,
    start_turn,
)
from vllm_stress.client.sharegpt import is_sharegpt, read_conversations
from vllm_stress.client.trace import TraceLine
from vllm_stress.users import chat  # the module, not the class: Locust would run every User class in this file
from vllm_stress.users.base import canary_request, send_request
from vllm_stress.users.target import TARGETS

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.users.target import Target

NEVER_IN_JSON = b"\0"  # an output marker no event has: every SSE event is parsed, so the answer text is collected

log = logging.getLogger(__name__)
_user_numbers = itertools.count(1)
_sizers: weakref.WeakKeyDictionary[Workload, TurnSizer | None] = weakref.WeakKeyDictionary()  # made at test start
_decks: weakref.WeakKeyDictionary[Workload, SessionDeck] = weakref.WeakKeyDictionary()  # --session-trace
_datasets: dict[str, list[list[str]] | None] = {}  # --dataset -> conversations (human turns), per process
_traces: dict[str, list[RecordedSession]] = {}  # --session-trace path -> its sessions, per process


class ChatSessionUser(chat.ChatUser):
    """A chat user that holds one multi-turn conversation at a time (docs/concepts/load-generator.md)."""

    request_name = "chat-session"
    output_marker = NEVER_IN_JSON
    arrival_starts = "session"  # an open loop's arrival starts a conversation; its turns follow answers and gaps
    replays_sessions = True  # --session-trace

    def __init__(self, environment: Environment) -> None:
        path = TARGETS[environment].options.session_trace
        if path:  # a connection for each request a recorded session can have in flight at once, its subagents' too
            with contextlib.suppress(OSError, EOFError, ValueError):  # the test start's checks say why, and stop
                self.connections = max(map(most_in_flight, trace_sessions(path)))
        super().__init__(environment)
        self.subagents: list[gevent.Greenlet] = []  # those its session launched, at any depth: none outlives it

    def on_start(self) -> None:
        super().on_start()
        options = self.environment.parsed_options
        worker = getattr(self.environment.runner, "worker_index", 0)
        seed = options.session_seed if options.session_seed is not None else random.randrange(2**32)
        self.number = next(_user_numbers)
        self.rng = random.Random(f"{seed}-{worker}-{self.number}")
        self.conversation: Conversation | None = None
        self.conversations = itertools.count(1)
        self.answer: list[str] = []
        self.joins = parse_start_share(options.session_start)  # --session-start: its first session joins mid-way

    def on_stop(self) -> None:
        gevent.killall(self.subagents)  # the run's stop: their requests cut, each a row (Aborted) as the user's own

    def wait_time(self) -> float:
        """Think time inside a conversation (a recorded session's gap before its next turn, capped); a new
        conversation starts at once."""
        if self.conversation is None:
            return 0.0
        options = self.environment.parsed_options
        if recorded := self.conversation.recorded:
            return capped_gap(recorded.turns[self.conversation.turn].gap_s, options.idle_gap_cap)
        return think_time(self.rng, options.think_time, options.think_dist)

    @task
    def turn(self) -> None:
        workload = self.workload
        if workload is None:  # the target could not be prepared (logged at test start)
            raise StopUser()
        if canary := canary_request(self):  # a question of its own between turns: the conversation waits for it
            send_request(self, canary, self.send)
            return
        lag, burst = (None, None) if self.conversation else self.session_arrival()
        if self.conversation is None:
            self.conversation = self.new_conversation()
            self.prime(self.conversation, workload)
        conversation = self.conversation
        if conversation.recorded:  # the subagents it launches before the turn, the awaited ones joined
            self.fan_out(conversation.recorded.turns[conversation.turn].fanout)
        spec = self.next_turn(conversation, workload)
        self.answer = []
        turn = (conversation.session_id, conversation.turn)
        exchange = send_request(self, spec, self.send, lag, session=turn, burst=burst)
        if exchange.error:
            self.end_conversation(failed=True)  # no answer to carry on with: a new conversation
            return
        answer = "".join(self.answer)
        conversation.messages.append(assistant_message(answer))
        if conversation.over:
            self.end_conversation()
            return
        sizer = _sizers.get(workload)
        conversation.next_target = sizer.history(exchange) if sizer else None

    def end_conversation(self, failed: bool = False) -> None:
        """The conversation is over: unless a failed turn ended it, the subagents it launches after its last turn;
        then every subagent it launched, those its turns went on without included, waited for."""
        recorded = self.conversation.recorded if self.conversation else None
        if recorded and not failed:
            self.fan_out(recorded.after)
        self.conversation = None
        try:
            while running := [greenlet for greenlet in self.subagents if not greenlet.dead]:  # launched meanwhile too
                gevent.joinall(running, raise_error=True)
        finally:  # the run's stop (or a bug) cut the wait: none runs on without its conversation
            gevent.killall(self.subagents)
            self.subagents.clear()

    def fan_out(self, agents: tuple[RecordedSession, ...]) -> None:
        """Launch ``agents`` together (a fan-out), each a subagent replaying its session in a greenlet of its own, and
        wait for the awaited ones (the join)."""
        greenlets = [gevent.spawn(self.subagent(agent).replay) for agent in agents]
        self.subagents += greenlets
        gevent.joinall([g for g, agent in zip(greenlets, agents, strict=True) if agent.awaited], raise_error=True)

    def subagent(self, agent: RecordedSession) -> ChatSessionUser:
        """The replayer of a subagent of this user's conversation: a shallow copy of the user (its client and
        connections, its target, its list of subagents) with a conversation and answer of its own, so that the
        concurrent greenlets share no request's state. Its session id is the conversation's and the agent's."""
        parent = self.conversation
        assert parent is not None
        twin = copy.copy(self)
        twin.conversation = Conversation(
            f"{parent.session_id}/{agent.session_id}", len(agent.turns), None, agent, parent.salt
        )
        twin.answer = []
        return twin

    def replay(self) -> None:
        """A subagent's session (run in its own greenlet): each turn after its gap (capped) and its own fan-out; a
        failed turn ends it, as it ends a session; then the subagents it launches after its last turn."""
        conversation, workload = self.conversation, self.workload
        assert conversation is not None and conversation.recorded is not None and workload is not None
        for recorded in conversation.recorded.turns:
            gevent.sleep(capped_gap(recorded.gap_s, self.environment.parsed_options.idle_gap_cap))
            self.fan_out(recorded.fanout)
            spec = self.next_turn(conversation, workload)
            self.answer = []
            if send_request(self, spec, self.send, session=(conversation.session_id, conversation.turn)).error:
                return
        self.fan_out(conversation.recorded.after)

    def session_arrival(self) -> tuple[float | None, int | None]:
        """An open loop of sessions (--arrival-rate, --microburst): wait for the next arrival to start one; (how late
        its first turn is sent, its microburst). A closed loop starts one at once: (None, None)."""
        arrivals = self.target.arrivals
        if not isinstance(arrivals, OpenLoopArrivals):  # no schedule (--trace is refused for sessions)
            return None, None
        lag = arrivals.wait()
        return lag, arrivals.burst  # the arrival just taken (the same greenlet, no yield)

    def new_conversation(self) -> Conversation:
        options = self.environment.parsed_options
        deck = _decks.get(self.workload) if self.workload else None
        if deck:  # --session-trace: the next recorded session, its id with its pass through the deck
            recorded, replay = deck.deal()
            session_id = self.pin(f"{recorded.session_id}/{replay}")
            salt = deck.salt_of(replay) + recorded.block_salt
            conversation = Conversation(session_id, len(recorded.turns), None, recorded, salt)
            if self.joins:  # the user's first session: its turns before the drawn one are not sent
                conversation.turn, self.joins = start_turn(recorded, self.joins, self.rng), None
            return conversation
        session_id = self.pin(f"{self.target.recorder.worker_id}-{self.number}-{next(self.conversations)}")
        conversations = dataset_conversations(options.dataset, options.num_prompts) if options.dataset else None
        texts = self.rng.choice(conversations) if conversations else None
        return Conversation(session_id, min(options.turns, len(texts)) if texts else options.turns, texts)

    def prime(self, conversation: Conversation, workload: Workload) -> None:
        """--session-primer: a recorded session joined past its first turn (--session-start) has its history put in
        the prefix cache first, as a fleet met mid-way would have it: the prompt of the last turn skipped, made as
        its replay would make it, max_tokens 1. Its row is named SESSION_PRIMER, of no session: in no figure. The
        joined turn follows whatever its answer (a failed primer leaves the history cold)."""
        if not (conversation.recorded and conversation.turn and self.environment.parsed_options.session_primer):
            return
        spec = self.recorded_turn(conversation, workload)  # conversation.turn: the last turn skipped
        send_request(self, replace(spec, max_tokens=1, session_turns=None), self.send, primer=True)

    def pin(self, session_id: str) -> str:
        """Start conversation ``session_id`` (returned): its affinity header, no cookie of the last one's router, and
        new connections under --connections per-session."""
        options = self.environment.parsed_options
        self.sticky_headers = {self.affinity_header: session_id} if self.affinity_header else {}
        if echoes_cookie(options.router_preset):
            self.client.cookiejar.clear()
        new_session(self.client, options.connections)
        return session_id

    def next_turn(self, conversation: Conversation, workload: Workload) -> RequestSpec:
        """The next turn's request: the history plus a new user message, with its target prompt tokens."""
        conversation.turn += 1
        if conversation.recorded:
            return self.recorded_turn(conversation, workload)
        text, new_tokens = self.new_message(conversation, workload)
        history = workload.overhead if conversation.turn == 1 else conversation.next_target
        target = None if history is None or new_tokens is None else history + new_tokens
        conversation.messages.append(user_message(text))
        return RequestSpec(text, target, workload.output_length())

    def recorded_turn(self, conversation: Conversation, workload: Workload) -> RequestSpec:
        """A recorded turn's request: its whole prompt (history included) made of its hash ids' blocks, salted
        (``SessionDeck.salt_of``), its recorded output length; the conversation's messages are that prompt."""
        assert conversation.recorded is not None
        options = self.environment.parsed_options
        recorded = conversation.recorded.turns[conversation.turn - 1]
        block_tokens = conversation.recorded.block_tokens
        line = TraceLine(0.0, recorded.input_tokens, recorded.output_tokens, recorded.hash_ids, block_tokens)
        spec = workload.trace_request(line, options.trace_block_size, salt=conversation.salt)
        conversation.messages = [user_message(spec.text)]
        return replace(spec, trace_reused_blocks=recorded.reused_blocks, session_turns=conversation.turns)

    def new_message(self, conversation: Conversation, workload: Workload) -> tuple[str, int | None]:
        """The text of the turn's user message and its tokens (None when unknown)."""
        options = self.environment.parsed_options
        sizer = _sizers.get(workload)
        if conversation.texts:
            text = conversation.texts[conversation.turn - 1]
            return text, sizer.message(text) if sizer else None
        if conversation.turn > 1:
            return " ".join(
                self.rng.choices(workload.words, k=options.turn_tokens)
            ), options.turn_tokens if sizer else None
        if workload.dataset:  # a JSONL dataset: its prompt opens the conversation
            drawn = self.rng.choice(workload.dataset)
            if drawn.target_prompt_tokens is None or sizer is None:
                return drawn.text, None
            return drawn.text, drawn.target_prompt_tokens - workload.overhead
        tokens = max(options.input_tokens, workload.overhead + 1)
        return workload.prompt(tokens, self.rng), tokens - workload.overhead

    @classmethod
    def prepare_workload(cls, target: Target, workload: Workload) -> None:
        """At test start, before any user runs (``Target.prepare``): measure what the turns add, the dataset's human
        turns included, so that no request but the measured load reaches the server during the run (a later turn
        is sized from the previous one's usage). Without /tokenize, turns after the first are not length-checked."""
        _sizers[workload] = None
        options = target.options
        if options.session_trace:  # the recorded turns carry their own lengths: nothing to size
            worker = getattr(target.environment.runner, "worker_index", 0)
            try:
                _decks[workload] = deck_for(options, trace_sessions(options.session_trace), worker)
            except ValueError as e:
                raise StopTarget(f"--session-trace: {e}") from None
            return
        if not workload.exact:
            return
        conversations = dataset_conversations(options.dataset, options.num_prompts) if options.dataset else None
        texts = [text for turns in conversations or () for text in turns[: options.turns]]
        tokenizer = Tokenizer(target.host, target.model, target.headers, chat=True, verify=not options.insecure)
        try:
            _sizers[workload] = TurnSizer(tokenizer, texts)
        except (requests.RequestException, ValueError, KeyError) as e:
            log.warning("Session turns after the first are not length-checked: /tokenize failed (%s)", e)
            return
        log.info("Session turns sized with %d /tokenize calls", tokenizer.calls)

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        if spec.canary:  # not part of the conversation
            return super().body(spec)
        assert self.conversation is not None  # the turn in flight is its conversation's
        return super().body(spec) | {"messages": list(self.conversation.messages)}

    def is_output(self, choice: dict[str, Any]) -> bool:
        content = (choice.get("delta") or {}).get("content")
        if content:
            self.answer.append(content)
        return super().is_output(choice)

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        super().read_json(response, exchange)
        message = (response.get("choices") or [{}])[0].get("message") or {}
        self.answer.append(message.get("content") or "")


ChatSessionUser.tasks = [ChatSessionUser.turn]  # not the inherited one-request task of LLMUser


def trace_sessions(path: str) -> list[RecordedSession]:
    """The sessions of --session-trace ``path``, read once per process."""
    if path not in _traces:
        _traces[path] = read_sessions(path)
    return _traces[path]


def dataset_conversations(dataset: str, num_prompts: int) -> list[list[str]] | None:
    """The human turns of the ShareGPT conversations in --dataset's files (None: not ShareGPT), read once per
    process; the ``--num-prompts`` sample of them, the conversations whose first turns the chat user would send."""
    if dataset not in _datasets:
        paths = local_paths(dataset)  # a Hub dataset's files (client/hubdataset.py), downloaded at the test start
        _datasets[dataset] = sample_dataset(read_conversations(*paths), num_prompts) if is_sharegpt(paths[0]) else None
    return _datasets[dataset]
