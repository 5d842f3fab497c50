"""Traffic classes: the kinds of request one run mixes (an interactive tier, a batch tier, an adapter), each with its
share of the users, its own lengths, vLLM ``priority``, ``model`` and SLO. The one grammar of ``--traffic-class``
(and a scenario's ``traffic-class`` key)::

    NAME:KEY=VALUE[,KEY=VALUE...][; NAME:...]

with KEY one of ``weight`` (share of the users, default 1), ``input`` and ``output`` (tokens; default the run's
--input-tokens and --output-tokens), ``dataset`` (a prompt file instead of ``input``), ``priority`` (vLLM's request
field: lower is served first; unset: not sent), ``model`` (a served model or LoRA adapter name; default the run's),
``canaries`` (``run``, the default: the correctness canaries its users send ask the run's model; ``model``: they ask
the class's ``model`` too), ``api`` (the API its users' requests go to, a mixed fleet: ``chat``, ``completions`` or
a pooling API, ``embeddings``, ``rerank``, ``score``; default the locustfile's own) and ``slo``, last, in the grammar
of ``vllm_stress.core.slo`` (its commas belong to it). A pooling class generates nothing: no ``output``, and an SLO
on ``e2e`` only; its ``input`` is each input's (or document's) tokens. Example::

    interactive:weight=3,input=256,output=64,priority=0,slo=ttft_p99=500ms; batch:input=4096,priority=1
    chat:weight=3,input=256,output=64; embed:weight=1,api=embeddings,input=128,slo=e2e_p99=2s

Users get their class by their index, in the order of a smooth weighted round robin, so that any first N users hold
the classes' shares as exactly as N allows (weights 3 and 1: A A B A, A A B A ...)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vllm_stress.core.slo import parse_items, split_name

NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")
INT_KEYS = ("input", "output", "priority")
CANARY_MODELS = ("run", "model")  # the ``canaries`` key's values: the model a class's canaries ask
POOLING_APIS = ("embeddings", "rerank", "score")  # vLLM's pooling APIs, as their paths end (/v1/embeddings ...)
APIS = ("chat", "completions", *POOLING_APIS)  # the ``api`` key's values: the request names of the users sending them
POOLING_SLO_METRIC = "e2e"  # a pooling answer comes whole: its only latency
KEYS = ("weight", *INT_KEYS, "dataset", "model", "canaries", "api", "slo")
SLO_KEY = "slo="


@dataclass(frozen=True)
class TrafficClass:
    name: str
    weight: float = 1.0
    input: int | None = None  # prompt tokens (None: the run's --input-tokens)
    output: int | None = None  # output tokens (None: the run's --output-tokens)
    dataset: str = ""  # a prompt file instead of generated prompts of ``input`` tokens
    priority: int | None = None  # vLLM's request field (None: not sent)
    model: str = ""  # a served model or LoRA adapter name ("": the run's model)
    slo: str = ""  # the class's SLO, vllm_stress.core.slo's grammar ("": none)
    canaries: str = "run"  # the model its users' canaries ask: "run" (the run's) or "model" (the class's model)
    api: str = ""  # the API its users' requests go to, one of APIS ("": the locustfile's own)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_class(text: str) -> TrafficClass:
    """One ``NAME:KEY=VALUE,...`` class; a ValueError naming what is wrong."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    if not NAME.match(name):
        raise ValueError(f"--traffic-class: {text.strip()!r} does not start with a NAME: (letters, digits, _ . -)")
    rest = rest.strip()
    slo = ""
    if rest.startswith(SLO_KEY) or f",{SLO_KEY}" in rest:
        at = 0 if rest.startswith(SLO_KEY) else rest.index(f",{SLO_KEY}") + 1
        rest, slo = rest[:at].rstrip(","), rest[at + len(SLO_KEY) :].strip()
    fields: dict[str, Any] = {"name": name, "slo": slo}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals or key not in KEYS or key == "slo" or not value:
            raise ValueError(f"--traffic-class {name}: {item!r} is not KEY=VALUE with KEY one of {', '.join(KEYS)}")
        try:
            fields[key] = int(value) if key in INT_KEYS else float(value) if key == "weight" else value
        except ValueError:
            raise ValueError(f"--traffic-class {name}: {key} must be a number, got {value!r}") from None
    traffic_class = TrafficClass(**fields)
    if not traffic_class.weight > 0:
        raise ValueError(f"--traffic-class {name}: weight must be more than 0")
    if traffic_class.canaries not in CANARY_MODELS:
        raise ValueError(f"--traffic-class {name}: canaries must be one of {', '.join(CANARY_MODELS)}")
    for key in ("input", "output"):
        if (value := getattr(traffic_class, key)) is not None and value < 1:
            raise ValueError(f"--traffic-class {name}: {key} must be at least 1")
    check_api(traffic_class)
    return traffic_class


def check_api(traffic_class: TrafficClass) -> None:
    """A known ``api``; a pooling one without ``output`` (nothing is decoded) and with an SLO on e2e alone."""
    name, api = traffic_class.name, traffic_class.api
    if api and api not in APIS:
        raise ValueError(f"--traffic-class {name}: api must be one of {', '.join(APIS)}, got {api!r}")
    if api not in POOLING_APIS:
        return
    if traffic_class.output is not None:
        raise ValueError(f"--traffic-class {name}: api={api} generates nothing: no output=")
    metrics = {split_name(item)[0] for item, _, _ in parse_items(traffic_class.slo)} if traffic_class.slo else set()
    if metrics - {POOLING_SLO_METRIC}:
        raise ValueError(f"--traffic-class {name}: api={api} is timed end to end: its slo names e2e only")


def parse_classes(texts: Iterable[str]) -> list[TrafficClass]:
    """The classes of every ``--traffic-class`` value (each may hold several, separated by ``;``); names unique."""
    classes = [parse_class(part) for text in texts for part in text.split(";") if part.strip()]
    names = [c.name for c in classes]
    if len(set(names)) != len(names):
        raise ValueError(f"--traffic-class: a class is declared twice ({', '.join(names)})")
    return classes


def from_json(items: Iterable[dict[str, Any]]) -> list[TrafficClass]:
    """The classes as run.json keeps them."""
    return [TrafficClass(**item) for item in items]


class ClassMix:
    """Which class the user of each index gets: a smooth weighted round robin (nginx's), extended as indices come."""

    def __init__(self, classes: Sequence[TrafficClass]) -> None:
        if not classes:
            raise ValueError("a class mix needs at least one class")
        self.classes = list(classes)
        self.total = sum(c.weight for c in classes)
        self.current = [0.0] * len(classes)
        self.order: list[int] = []

    def of_user(self, index: int) -> TrafficClass:
        while len(self.order) <= index:
            self.current = [now + c.weight for now, c in zip(self.current, self.classes, strict=True)]
            chosen = max(range(len(self.classes)), key=lambda i: (self.current[i], -i))
            self.current[chosen] -= self.total
            self.order.append(chosen)
        return self.classes[self.order[index]]
