"""vLLM's two scheduling policies (``--scheduling-policy``): the order of the waiting queue and the running request
preempted when the KV cache is short, as vLLM's V1 scheduler has them (``vllm/v1/core/sched/request_queue.py``,
``scheduler.py``).

``fcfs`` (the default): the waiting queue is a deque in arrival order, a preempted request goes back to its front,
and the victim is the request admitted last. ``priority``: the waiting queue is a heap on (priority, arrival time),
a preempted request is pushed back by the same key, and the victim is the running request with the largest
(priority, arrival time): the least urgent, latest arrival. The request's ``priority`` field (lower is served
first; vLLM also reads an ``X-Vllm-Priority`` header) is kept under ``fcfs`` and has no effect there, as in vLLM,
whose entry points accept it without checking the policy."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .sequence import Sequence

POLICIES = ("fcfs", "priority")
PRIORITY_HEADER = "X-Vllm-Priority"  # vLLM's entrypoints/generate/base/serving.py: wins over the body's field


class WaitingQueue(Protocol):
    """What the engine does with its waiting queue (a deque's names, as vLLM's FCFS queue is one)."""

    def append(self, seq: Sequence) -> None: ...
    def appendleft(self, seq: Sequence) -> None: ...
    def popleft(self) -> Sequence: ...
    def remove(self, seq: Sequence) -> None: ...
    def __getitem__(self, index: int) -> Sequence: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Sequence]: ...


class PriorityQueue:
    """vLLM's PriorityRequestQueue: a heap on (priority, arrival, then the order requests were added)."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, float, int, Sequence]] = []
        self.order = itertools.count()

    def append(self, seq: Sequence) -> None:
        heapq.heappush(self.heap, (seq.priority, seq.arrival, next(self.order), seq))

    appendleft = append  # a preempted request has no front to go back to: its key places it

    def popleft(self) -> Sequence:
        return heapq.heappop(self.heap)[3]

    def remove(self, seq: Sequence) -> None:
        self.heap = [entry for entry in self.heap if entry[3] is not seq]
        heapq.heapify(self.heap)

    def __getitem__(self, index: int) -> Sequence:
        if index != 0:
            raise IndexError("a priority queue shows only its head")
        return self.heap[0][3]

    def __len__(self) -> int:
        return len(self.heap)

    def __iter__(self) -> Iterator[Sequence]:
        return (entry[3] for entry in sorted(self.heap, key=lambda entry: entry[:3]))


def waiting_queue(policy: str) -> WaitingQueue:
    if policy not in POLICIES:
        raise ValueError(f"scheduling_policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    return PriorityQueue() if policy == "priority" else deque()


def victim(running: list[Sequence], policy: str) -> Sequence:
    """The running sequence to preempt: the last admitted (fcfs), or the largest (priority, arrival)."""
    if policy == "priority":
        return max(running, key=lambda seq: (seq.priority, seq.arrival))
    return running[-1]


def preempt_for(
    running: list[Sequence], scheduled: list[tuple[Sequence, int]], index: int, policy: str
) -> tuple[Sequence, int, int]:
    """Take the victim out of ``running`` (and out of this step's ``scheduled``, as vLLM's priority policy does for
    a victim it had already scheduled): returns it, the running index of the request being scheduled after the
    removal, and the tokens given back to the step's budget."""
    seq = victim(running, policy)
    at = len(running) - 1 if running[-1] is seq else running.index(seq)
    del running[at]
    restored = 0
    for position, (other, tokens) in enumerate(scheduled):
        if other is seq:
            del scheduled[position]
            restored = tokens
            break
    return seq, index - 1 if at < index else index, restored


def header_priority(value: str | None, body_priority: int) -> int:
    """The request's priority: the header's when it is an integer, else the body's (vLLM's _get_priority)."""
    if value is not None:
        try:
            return int(value)
        except ValueError:
            pass
    return body_priority
