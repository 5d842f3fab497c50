"""Write the bundled synthetic question sets: ``synthetic-mc.jsonl`` (MMLU shape) and ``synthetic-math.jsonl``
(GSM8K shape), 200 questions each, and three small request traces in the published formats, ``mooncake-sample.jsonl``
(Mooncake), ``azure-sample.csv`` (Azure LLM inference trace) and ``burstgpt-sample.csv`` (BurstGPT, whole seconds as
published, 5 of its rows failed ones): 240 Poisson arrivals over a minute each, ``bailian-sample.jsonl`` (Alibaba's
Bailian format: 30 multi-turn sessions over a minute), ``weka-sample.jsonl`` (three agent traces in the Weka format
of kv-cache-tester and AgentX: a fan-out of three subagents and an asynchronous one, nested subagents, long think
times), ``otel-sample.json`` (an OTLP/JSON export of two OpenTelemetry GenAI traces, one an agent with two subagents
running together), ``tracelab-sample.jsonl`` (three TraceLab coding-agent sessions), and ``sharegpt-sample.json``, 40 chat conversations in the ShareGPT format; the same every time (fixed
seeds).

    python scenarios/data/make_synthetic.py

Every question states its arithmetic ("the sum of 12 and 30", "What is 17 * 23 - 45?"), so the simulator's answer
model (``vllm_stress/simulator/model/answers.py``) can work out the right answer by itself; for multiple choice exactly one choice
equals it. The math set has negative, decimal and four-digit answers, so the graders see signs, decimals and
thousands separators. In the Mooncake trace each request's prompt is one of eight families' first blocks (a shared
system prompt or document) and blocks of its own, so a replay exercises the prefix cache. For demos and tests only:
these are not a benchmark, nor real traffic (the real traces: the Mooncake repository's FAST'25 traces, Azure's
AzurePublicDataset, HPMLL's BurstGPT and alibaba-edu's qwen-bailian-usagetraces-anon, all on GitHub; ShareGPT: ``anon8231489123/ShareGPT_Vicuna_unfiltered`` on
Hugging Face).
"""

from __future__ import annotations

import csv
import io
import json
import random
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUESTIONS_PER_SET = 200
SEED = 20240601
_DISTRACTOR_OFFSETS = (-11, -10, -2, -1, 1, 2, 9, 10)
TRACE_LINES, TRACE_RATE_PER_S, TRACE_SEED = 240, 4.0, 20251122
BLOCK_TOKENS = 512  # of one Mooncake hash id


def number(value: Fraction) -> str:
    """Plain text of an exact result: an integer, or its terminating decimal."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.4f}".rstrip("0")


def mc_question(rng: random.Random) -> tuple[str, str, Fraction]:
    """(subject, question, right value) of one multiple-choice question."""
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
    return rng.choice(
        [
            ("addition", f"Which number is the sum of {a} and {b}?", Fraction(a + b)),
            ("multiplication", f"Which number is the product of {a} and {c}?", Fraction(a * c)),
            ("subtraction", f"Which number is the difference between {a} and {b}?", Fraction(a - b)),
            ("arithmetic", f"What is {a} * {c} - {b}?", Fraction(a * c - b)),
            ("division", f"What is ({a * c} + {b * c}) / {c}?", Fraction(a + b)),
        ]
    )


def mc_line(rng: random.Random, index: int) -> dict:
    subject, question, right = mc_question(rng)
    values = [right] + [right + offset for offset in rng.sample(_DISTRACTOR_OFFSETS, 3)]
    rng.shuffle(values)
    return {
        "id": f"syn-mc-{index:03d}",
        "subject": subject,
        "question": question,
        "choices": [number(v) for v in values],
        "answer": values.index(right),
    }


def math_question(rng: random.Random) -> tuple[str, str, Fraction]:
    """(question, worked solution without the final line, right value) of one math question."""
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 12)
    big, price, divisor = rng.randint(101, 999), Fraction(rng.randint(101, 2999), 4), rng.choice((2, 4, 5, 8))
    cost = f"{float(price):.2f}"
    return rng.choice(
        [
            (f"What is {a} + {b} * {c}?", f"{b} * {c} = {b * c}. {a} + {b * c} = {a + b * c}.", Fraction(a + b * c)),
            (
                f"Compute ({a} - {b}) * {c}.",
                f"{a} - {b} = {a - b}. {a - b} * {c} = {(a - b) * c}.",
                Fraction((a - b) * c),
            ),
            (
                f"A ticket costs ${cost}. How many dollars do {c} tickets cost? Compute {c} * {cost}.",
                f"{c} tickets cost {c} * {cost} = {number(c * price)} dollars.",
                c * price,
            ),
            (f"What is {a} - {b + 100}?", f"{a} - {b + 100} = {a - b - 100}.", Fraction(a - b - 100)),
            (
                f"A farm has {big} rows of {a} plants. What is {big} * {a}, the number of plants?",
                f"{big} * {a} = {big * a}.",
                Fraction(big * a),
            ),
            (
                f"What is the quotient of {a} and {divisor}?",
                f"{a} / {divisor} = {number(Fraction(a, divisor))}.",
                Fraction(a, divisor),
            ),
        ]
    )


def math_line(rng: random.Random, index: int) -> dict:
    question, solution, right = math_question(rng)
    return {"id": f"syn-math-{index:03d}", "question": question, "answer": f"{solution}\n#### {number(right)}"}


def trace_times(rng: random.Random) -> list[float]:
    """Poisson arrival times in seconds: TRACE_LINES of them at TRACE_RATE_PER_S."""
    times, now = [], 0.0
    for _ in range(TRACE_LINES):
        times.append(now)
        now += rng.expovariate(TRACE_RATE_PER_S)
    return times


def mooncake_lines(rng: random.Random) -> list[dict]:
    """Mooncake's JSONL fields: timestamp (ms), input_length, output_length, hash_ids (one per 512-token block)."""
    lines = []
    for index, at in enumerate(trace_times(rng)):
        family, shared = rng.randrange(8), rng.randint(1, 2)
        blocks = shared + rng.randint(0, 1)
        own = [10_000 + index * 4 + block for block in range(blocks - shared)]
        lines.append(
            {
                "timestamp": round(at * 1000),
                "input_length": blocks * BLOCK_TOKENS - rng.randrange(256),
                "output_length": rng.randint(8, 32),
                "hash_ids": [family * 100 + block for block in range(shared)] + own,
            }
        )
    return lines


BAILIAN_SESSIONS, BAILIAN_BLOCK_TOKENS, BAILIAN_FAMILIES = 30, 16, 4  # Bailian's hash ids are of 16 tokens


def bailian_lines(rng: random.Random) -> list[dict]:
    """Bailian's JSONL fields (Alibaba's qwen-bailian-usagetraces-anon): chat_id, parent_chat_id (-1 for a
    session's first chat), timestamp (s), input_length, output_length, type, turn, hash_ids (one per 16-token block).
    BAILIAN_SESSIONS sessions of 1 to 4 chats over a minute, each first chat one of BAILIAN_FAMILIES system prompts
    (8 shared blocks) and its own question; a follow-up is the whole request again, as Bailian records it: its
    parent's blocks, the parent's answer and its own new blocks."""
    lines, chat_ids, own = [], iter(rng.sample(range(100_000, 1_000_000), 4 * BAILIAN_SESSIONS)), 10_000
    for session in range(BAILIAN_SESSIONS):
        family = 1_000 * rng.randrange(BAILIAN_FAMILIES)
        at, parent, blocks = session * 2.0 + rng.random(), -1, [family + block for block in range(8)]
        for turn in range(1, rng.randint(1, 4) + 1):
            output = rng.randint(8, 48)
            fresh = rng.randint(4, 20) if turn == 1 else rng.randint(2, 10)
            blocks = blocks + list(range(own, own + fresh))
            own += fresh
            chat = next(chat_ids)
            lines.append(
                {
                    "chat_id": chat,
                    "parent_chat_id": parent,
                    "timestamp": round(at, 3),
                    "input_length": len(blocks) * BAILIAN_BLOCK_TOKENS - rng.randrange(BAILIAN_BLOCK_TOKENS),
                    "output_length": output,
                    "type": "text",
                    "turn": turn,
                    "hash_ids": blocks,
                }
            )
            answer = -(-output // BAILIAN_BLOCK_TOKENS)  # the answer's blocks, in the next chat's prompt
            blocks = blocks + list(range(own, own + answer))
            own += answer
            parent, at = chat, at + rng.uniform(2.0, 15.0)
    return sorted(lines, key=lambda line: line["timestamp"])


WEKA_BLOCK_TOKENS, WEKA_MODEL = 64, "synthetic-agent"


class WekaCalls:
    """The calls of one synthetic Weka trace: each a whole prompt of 64-token blocks, a session's history growing by
    one or two new blocks a call (``extend``), a subagent's opening with the trace's first block (its system
    prompt) and blocks of its own."""

    def __init__(self, rng: random.Random, first_block: int) -> None:
        self.rng = rng
        self.next_block = first_block

    def fresh(self, count: int) -> list[int]:
        self.next_block += count
        return list(range(self.next_block - count, self.next_block))

    def call(self, t: float, history: list[int], think: float | None = None, kind: str = "n") -> dict:
        """A call at ``t`` whose prompt is ``history`` (extended in place by its new blocks), 8 to 40 tokens out."""
        history += self.fresh(self.rng.randint(1, 2))
        out = self.rng.randint(8, 40)
        return {
            "t": t,
            "type": kind,
            "model": WEKA_MODEL,
            "in": len(history) * WEKA_BLOCK_TOKENS - self.rng.randrange(WEKA_BLOCK_TOKENS),
            "out": out,
            "hash_ids": list(history),
            "input_types": ["text"],
            "output_types": ["text"],
            "stop": self.rng.choice(("tool_use", "end_turn")),
            "api_time": round(out * 0.02, 3),
            "think_time": think,
            "ttft": 0.15 if kind == "s" else None,
        }

    def subagent(self, t: float, agent_id: str, times: list[float], status: str = "completed") -> dict:
        """A subagent marker at ``t`` with a call at each of ``times``."""
        history = [0, *self.fresh(2)]
        requests = [self.call(at, history) for at in times]
        return {
            "t": t,
            "type": "subagent",
            "agent_id": agent_id,
            "subagent_type": "explore",
            "duration_ms": round((times[-1] - t + 1.0) * 1000),
            "total_tokens": sum(call["in"] + call["out"] for call in requests),
            "tool_use_count": len(requests),
            "status": status,
            "requests": requests,
            "models": [WEKA_MODEL],
            "tool_tokens": 0,
            "system_tokens": WEKA_BLOCK_TOKENS,
        }


def weka_trace(trace_id: str, scope: str, requests: list[dict]) -> dict:
    return {
        "id": trace_id,
        "models": [WEKA_MODEL],
        "block_size": WEKA_BLOCK_TOKENS,
        "hash_id_scope": scope,
        "tool_tokens": 0,
        "system_tokens": WEKA_BLOCK_TOKENS,
        "requests": requests,
        "totals": {"requests": sum(1 for r in requests if r["type"] != "subagent")},
    }


def weka_traces(rng: random.Random) -> list[dict]:
    """Three Weka traces: ``weka-fanout`` (a fan-out of three subagents, one of two calls, joined before the parent's
    next call; then an async_launched subagent its parent does not wait for; a 30 s think time), ``weka-nested``
    (a subagent that fans out to one of its own) and ``weka-plain`` (global hash ids, a 20 s gap and a short one)."""
    calls = WekaCalls(rng, 1)
    parent = [0, *calls.fresh(2)]  # block 0: the trace's system prompt, its subagents' too
    fanout = [
        calls.call(0.0, parent, kind="s"),
        calls.call(3.0, parent, think=0.2),
        calls.subagent(5.0, "explore-1", [5.1, 7.0]),
        calls.subagent(5.0, "explore-2", [5.2]),
        calls.subagent(5.0, "explore-3", [5.1]),
        calls.call(12.0, parent, kind="s"),
        calls.subagent(13.0, "background-1", [13.1], status="async_launched"),
        calls.call(13.2, parent, think=0.0),
        calls.call(60.0, parent, think=30.0),
    ]
    calls = WekaCalls(rng, 1)
    parent = [0, *calls.fresh(2)]
    planner = calls.subagent(2.0, "planner", [2.1, 4.0])
    planner["requests"].insert(1, calls.subagent(2.5, "worker", [2.6]))
    nested = [calls.call(0.0, parent), planner, calls.call(5.0, parent), calls.call(6.0, parent)]
    calls = WekaCalls(rng, 5_000)
    parent = calls.fresh(3)
    plain = [calls.call(0.0, parent), calls.call(20.0, parent), calls.call(20.5, parent, think=0.1)]
    return [
        weka_trace("weka-fanout", "local", fanout),
        weka_trace("weka-nested", "local", nested),
        weka_trace("weka-plain", "global", plain),
    ]


OTEL_EPOCH_NS = 1_750_000_000 * 10**9  # the sample's first span's start
OTEL_MODEL = "synthetic-agent"


def otel_attributes(**values: str | int) -> list[dict]:
    """OTLP/JSON attributes: text as stringValue, whole numbers as intValue (64-bit integers are text in OTLP/JSON;
    keys with dots given with underscores for the gen_ai ones' namespaces)."""
    items = []
    for key, value in values.items():
        kind = {"stringValue": value} if isinstance(value, str) else {"intValue": str(value)}
        items.append({"key": key.replace("__", "."), "value": kind})
    return items


class OtelSpans:
    """The spans of one synthetic OTLP trace: ids from a seeded generator, times in seconds from the sample's start,
    each conversation's prompt growing by its previous answer and some new tokens (``chat``)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.trace_id = f"{rng.getrandbits(128):032x}"
        self.spans: list[dict] = []
        self.prompts: dict[str, int] = {}  # a conversation's next prompt's history

    def span(self, name: str, start: float, end: float, parent: str, attributes: list[dict]) -> str:
        span_id = f"{self.rng.getrandbits(64):016x}"
        self.spans.append(
            {
                "traceId": self.trace_id,
                "spanId": span_id,
                "parentSpanId": parent,
                "name": name,
                "kind": 3 if name.startswith(("chat", "text_completion")) else 1,  # CLIENT, INTERNAL
                "startTimeUnixNano": str(OTEL_EPOCH_NS + round(start * 1e9)),
                "endTimeUnixNano": str(OTEL_EPOCH_NS + round(end * 1e9)),
                "attributes": attributes,
                "status": {},
            }
        )
        return span_id

    def agent(self, name: str, start: float, end: float, parent: str = "") -> str:
        attributes = otel_attributes(gen_ai__operation__name="invoke_agent", gen_ai__agent__name=name)
        return self.span(f"invoke_agent {name}", start, end, parent, attributes)

    def chat(self, parent: str, start: float, conversation: str, operation: str = "chat", restart: bool = False) -> str:
        """An LLM call at ``start``: its prompt the conversation's history (none: ``restart``) and 80 to 400 new
        tokens, its answer 20 to 60 tokens, taking 0.02 s a token."""
        history = 0 if restart else self.prompts.get(conversation, 0)
        prompt, answer = history + self.rng.randint(80, 400), self.rng.randint(20, 60)
        self.prompts[conversation] = prompt + answer
        usage = ("gen_ai__usage__prompt_tokens", "gen_ai__usage__completion_tokens")
        if operation == "chat":
            usage = ("gen_ai__usage__input_tokens", "gen_ai__usage__output_tokens")
        attributes = otel_attributes(
            gen_ai__operation__name=operation,
            gen_ai__request__model=OTEL_MODEL,
            **dict(zip(usage, (prompt, answer), strict=True)),
        )
        return self.span(f"{operation} {OTEL_MODEL}", start, start + 0.02 * answer, parent, attributes)

    def tool(self, parent: str, start: float, end: float, name: str) -> None:
        attributes = otel_attributes(gen_ai__operation__name="execute_tool", gen_ai__tool__name=name)
        self.span(f"execute_tool {name}", start, end, parent, attributes)


def otel_export(rng: random.Random) -> dict:
    """One OTLP/JSON export of two traces: ``coder`` (an agent's four calls, two subagents of two calls each running
    together between its second and third, joined before the third; tool calls; a 3 s gap) and a chain of three
    text completions with the older usage keys, no agent span, an HTTP span, and a third call that starts its
    history over."""
    coder = OtelSpans(rng)
    root = coder.agent("coder", 0.0, 16.0)
    coder.chat(root, 0.0, "coder")
    coder.tool(root, 1.3, 1.6, "read_file")
    coder.chat(root, 1.8, "coder")
    for name, start, calls in (("explorer", 3.5, (3.6, 5.0)), ("reviewer", 3.55, (3.7, 4.8))):
        agent = coder.agent(name, start, 7.0, root)
        for at in calls:
            coder.chat(agent, at, name)
        coder.tool(agent, calls[0] + 1.0, calls[1] - 0.1, "grep")
    coder.chat(root, 7.5, "coder")
    coder.chat(root, 12.0, "coder")
    chain = OtelSpans(rng)
    workflow = chain.span("workflow", 20.0, 30.0, "", otel_attributes(service__step="summarise"))
    chain.chat(workflow, 20.0, "chain", "text_completion")
    chain.span("GET /docs", 21.5, 21.9, workflow, otel_attributes(http__request__method="GET"))
    chain.chat(workflow, 22.0, "chain", "text_completion")
    chain.chat(workflow, 24.5, "chain", "text_completion", restart=True)
    resource = {"attributes": otel_attributes(service__name="synthetic-agents")}
    scope = {"name": "synthetic.genai", "version": "1.0"}
    spans = coder.spans + chain.spans
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": scope, "spans": spans}]}]}


def tracelab_rounds(rng: random.Random) -> list[dict]:
    """TraceLab's round fields, as inference-perf's tracelab_trace_replay reads them: three sessions (Claude Code
    and Codex) of 3 to 5 rounds, each repeating most of its history (prefix_tokens; one round a compaction that
    keeps only a little of it) and adding new tokens, its tool calls' latencies the gap before the next round."""
    rounds = []
    for number, provider in enumerate(("claude_code", "codex", "claude_code")):
        session, history = f"{provider}:session-{number}", 0
        for index in range(rng.randint(3, 5)):
            prefix = history if index != 3 else rng.randint(100, 300)
            new = rng.randint(100, 500)
            out = rng.randint(20, 80)
            tools = [
                {"tool_name": rng.choice(("Bash", "Read", "Edit")), "tool_wall_latency_ms": rng.randint(100, 4000)}
                for _ in range(rng.randint(0, 2))
            ]
            rounds.append(
                {
                    "session_id": session,
                    "round_id": f"{session}:{index}",
                    "round_index": index,
                    "provider": provider,
                    "model": OTEL_MODEL,
                    "input_tokens_total": prefix + new,
                    "prefix_tokens": prefix,
                    "newly_append_tokens": new,
                    "output_tokens": out,
                    "tools": tools,
                }
            )
            history = prefix + new + out
    return rounds


def azure_csv(rng: random.Random) -> str:
    """Azure's CSV columns: TIMESTAMP (7-digit fractions, as published), ContextTokens, GeneratedTokens."""
    start = datetime(2023, 11, 16, 18, 15, 46)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    for at in trace_times(rng):
        stamp = (start + timedelta(seconds=at)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        writer.writerow([stamp, rng.randint(100, 1000), rng.randint(8, 64)])
    return out.getvalue()


BURSTGPT_FAILED = 5  # rows of the BurstGPT sample with Response tokens 0: requests that failed when recorded


def burstgpt_csv(rng: random.Random) -> str:
    """BurstGPT's CSV columns: Timestamp (whole seconds), Model, Request tokens, Response tokens, Total tokens, Log
    Type; BURSTGPT_FAILED rows with 0 Response tokens, as its files with failures have."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
    times = trace_times(rng)
    failed = set(rng.sample(range(1, len(times)), BURSTGPT_FAILED))
    for index, at in enumerate(times):
        request, response = rng.randint(100, 1000), 0 if index in failed else rng.randint(8, 64)
        model, log_type = rng.choice(("ChatGPT", "GPT-4")), rng.choice(("Conversation log", "API log"))
        writer.writerow([int(at), model, request, response, request + response, log_type])
    return out.getvalue()


SHAREGPT_CONVERSATIONS = 40
SHAREGPT_SEED = 20240603
_CHAT_SUBJECTS = (
    "a garden",
    "the river",
    "an old castle",
    "a market town",
    "the winter sky",
    "a forest road",
    "an island village",
    "a city bridge",
    "the morning light",
    "a music hall",
)
_CHAT_ASKS = (
    "Tell me about {}.",
    "Write a short story about {}.",
    "What would you see in {}?",
    "Describe {} in a few lines.",
    "Give me three facts about {}.",
)
_CHAT_FOLLOW_UPS = (
    "Make it shorter.",
    "Now say it as a poem.",
    "Add more about the people there.",
    "What happens at night?",
    "Explain that again for a child.",
    "Why is that?",
    "Can you give an example?",
    "And in the summer?",
)


def sharegpt_items(rng: random.Random) -> list[dict]:
    """ShareGPT's shape (the Hugging Face ShareGPT_Vicuna_unfiltered JSON): {"id", "conversations": [{"from":
    "human" | "gpt", "value"}]}, each of 2 to 6 exchanges; the gpt turns are filler (the suite never sends them)."""
    items = []
    for index in range(SHAREGPT_CONVERSATIONS):
        turns = [rng.choice(_CHAT_ASKS).format(rng.choice(_CHAT_SUBJECTS))]
        turns += rng.sample(_CHAT_FOLLOW_UPS, rng.randint(1, 5))
        conversation = []
        for turn in turns:
            conversation += [
                {"from": "human", "value": turn},
                {"from": "gpt", "value": f"Here is an answer of {rng.randint(20, 200)} words."},
            ]
        items.append({"id": f"synthetic-{index}", "conversations": conversation})
    return items


def write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def main(folder: Path = HERE) -> None:
    rng = random.Random(SEED)
    write(folder / "synthetic-mc.jsonl", [mc_line(rng, i) for i in range(1, QUESTIONS_PER_SET + 1)])
    write(folder / "synthetic-math.jsonl", [math_line(rng, i) for i in range(1, QUESTIONS_PER_SET + 1)])
    traces = random.Random(TRACE_SEED)
    write(folder / "mooncake-sample.jsonl", mooncake_lines(traces))
    (folder / "azure-sample.csv").write_text(azure_csv(traces))
    (folder / "burstgpt-sample.csv").write_text(burstgpt_csv(random.Random(TRACE_SEED + 1)))
    write(folder / "bailian-sample.jsonl", bailian_lines(random.Random(TRACE_SEED + 2)))
    write(folder / "weka-sample.jsonl", weka_traces(random.Random(TRACE_SEED + 3)))
    (folder / "otel-sample.json").write_text(json.dumps(otel_export(random.Random(TRACE_SEED + 4)), indent=1))
    write(folder / "tracelab-sample.jsonl", tracelab_rounds(random.Random(TRACE_SEED + 5)))
    (folder / "sharegpt-sample.json").write_text(json.dumps(sharegpt_items(random.Random(SHAREGPT_SEED)), indent=1))


if __name__ == "__main__":
    main()
