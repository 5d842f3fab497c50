"""The traffic classes of one load-generating process (``--traffic-class``, vllm_stress.core.classes): which class
each of its users takes, each class's workload (its lengths or dataset) and the request fields a class sets
(``priority``, ``model``)."""

from __future__ import annotations

import argparse
import copy
import random
from collections.abc import Callable
from typing import Any

from vllm_stress.client.prompts import Tokenizer, Workload, build_workload
from vllm_stress.core.classes import ClassMix, TrafficClass, parse_classes


def declared(options: argparse.Namespace) -> list[TrafficClass]:
    """The run's classes (none without --traffic-class); a ValueError for a malformed one."""
    return parse_classes(getattr(options, "traffic_class", None) or [])


def run_json(options: argparse.Namespace) -> list[dict[str, Any]] | None:
    """run.json's ``traffic_classes``: the declared classes, or None (none, or malformed: the run is refused)."""
    try:
        return [c.as_json() for c in declared(options)] or None
    except ValueError:
        return None


CANARY_STATS_SUFFIX = " canary"  # the correctness canaries' entries in Locust's statistics: ``chat canary``


def stats_name(request_name: str, traffic_class: str, canary: bool = False) -> str:
    """The request's entry in Locust's statistics: its name, with its class when it has one (``chat [batch]``); a
    canary kept apart from the figures (``canary``) has its own, classless (``chat canary``)."""
    if canary:
        return request_name + CANARY_STATS_SUFFIX
    return f"{request_name} [{traffic_class}]" if traffic_class else request_name


def request_fields(traffic_class: TrafficClass | None, canary: bool = False) -> dict[str, Any]:
    """The request fields a class sets: vLLM's ``priority`` and the ``model`` (a served model or an adapter); a
    ``canary``'s model only when the class asks (``canaries=model``)."""
    if traffic_class is None:
        return {}
    fields: dict[str, Any] = {} if traffic_class.priority is None else {"priority": traffic_class.priority}
    asks_model = traffic_class.model and (not canary or traffic_class.canaries == "model")
    return fields | ({"model": traffic_class.model} if asks_model else {})


def canary_model(traffic_class: TrafficClass | None, run_model: str) -> str:
    """The model a canary of a user of ``traffic_class`` asks (answers.csv): the class's when it asks, else the
    run's."""
    return str(request_fields(traffic_class, canary=True).get("model", run_model))


class ClassSet:
    """This process's classes: the next user's class (by its index in the process, interleaved with the other
    workers' so that the run's first users are spread over the classes) and each class's workload."""

    def __init__(self, classes: list[TrafficClass], worker_index: int = 0, workers: int = 1) -> None:
        self.mix = ClassMix(classes)
        self.worker_index = worker_index
        self.workers = max(workers, 1)
        self.started = 0
        self.workloads: dict[tuple[bool, str], Workload] = {}

    def next_class(self) -> TrafficClass:
        index = self.started * self.workers + self.worker_index
        self.started += 1
        return self.mix.of_user(index)

    def prepare(
        self, base: dict[bool, Workload], options: argparse.Namespace, tokenizer: Callable[[bool], Tokenizer]
    ) -> None:
        """Each class's workload for chat and plain prompts, from the process's ``base`` ones: the same words and
        template overhead with the class's lengths, or its own dataset sized with ``tokenizer(chat)``'s server."""
        for chat, workload in base.items():
            for traffic_class in self.mix.classes:
                sizer = tokenizer(chat) if traffic_class.dataset else None
                self.workloads[chat, traffic_class.name] = class_workload(workload, traffic_class, options, sizer)

    def take(self, chat: bool) -> tuple[TrafficClass, Workload | None]:
        """A starting user's class and its workload."""
        traffic_class = self.next_class()
        return traffic_class, self.workload(chat, traffic_class)

    def workload(self, chat: bool, traffic_class: TrafficClass) -> Workload | None:
        """The class's workload of chat or plain prompts (None: that kind was not prepared)."""
        return self.workloads.get((chat, traffic_class.name))


def class_workload(
    base: Workload, traffic_class: TrafficClass, options: argparse.Namespace, tokenizer: Tokenizer | None
) -> Workload:
    """``base`` with the class's lengths (a copy with its own random stream), or a workload of its dataset."""
    if traffic_class.dataset and tokenizer is not None:
        given = vars(options) | {"dataset": traffic_class.dataset}
        given |= {"output_tokens": traffic_class.output or options.output_tokens}
        return build_workload(tokenizer, argparse.Namespace(**given), seed=random.randrange(2**32))
    workload = copy.copy(base)
    workload.rng = random.Random(f"{traffic_class.name}-{random.randrange(2**32)}")
    workload.input_tokens = traffic_class.input or base.input_tokens
    workload.output_tokens = traffic_class.output or base.output_tokens
    if traffic_class.input:  # generated prompts of the class's length, not the run's dataset
        workload.dataset = None
    return workload
