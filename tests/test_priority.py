"""The simulator's scheduling policies (vllm_stress/simulator/engine/priority.py) against vLLM's V1 scheduler rules: the
waiting order by (priority, arrival), the preemption victim, and a request's priority field and header."""

import pytest

from vllm_stress.simulator.api.parsing import parse_generation
from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.priority import PriorityQueue, header_priority, victim, waiting_queue
from vllm_stress.simulator.engine.sequence import Sequence
from vllm_stress.simulator.model.errors import ApiError
from vllm_stress.simulator.model.profiles import load_profile


def engine_with(policy, **overrides):
    return Engine(load_profile("cpu-tiny", {"jitter": 0.0, "scheduling_policy": policy, **overrides}))


def seq(priority, arrival, prompt=16, output=4):
    s = Sequence(prompt, output)
    s.priority, s.arrival = priority, arrival
    return s


def test_priority_queue_orders_by_priority_then_arrival_then_insertion():
    queue = PriorityQueue()
    late_urgent, early_lax, early_urgent, tie = seq(0, 5.0), seq(1, 1.0), seq(0, 2.0), seq(0, 2.0)
    for s in (late_urgent, early_lax, early_urgent, tie):
        queue.append(s)
    assert list(queue) == [early_urgent, tie, late_urgent, early_lax]
    assert queue[0] is early_urgent and len(queue) == 4
    queue.remove(tie)
    assert [queue.popleft() for _ in range(3)] == [early_urgent, late_urgent, early_lax]


def test_fcfs_queue_ignores_priority():
    queue = waiting_queue("fcfs")
    first, second = seq(5, 1.0), seq(0, 2.0)
    queue.append(first)
    queue.append(second)
    assert list(queue) == [first, second]
    with pytest.raises(ValueError, match="scheduling_policy"):
        waiting_queue("lifo")


def test_victim_is_last_admitted_under_fcfs_and_least_urgent_latest_under_priority():
    admitted = [seq(1, 1.0), seq(1, 3.0), seq(0, 4.0), seq(1, 2.0)]
    assert victim(admitted, "fcfs") is admitted[-1]
    assert victim(admitted, "priority") is admitted[1]  # priority 1, the latest of them


def test_header_wins_over_the_body_when_it_is_an_integer():
    assert header_priority("3", 1) == 3 and header_priority("x", 1) == 1 and header_priority(None, 2) == 2


def test_priority_engine_admits_the_urgent_request_first():
    engine = engine_with("priority", max_num_seqs=1)
    lax, urgent = Sequence(16, 2), Sequence(16, 2)
    urgent.priority = 0
    lax.priority = 1
    engine.add_request(lax, arrival=0.0)
    engine.add_request(urgent, arrival=0.0)  # queued after lax
    engine.step()
    assert engine.running == [urgent] and list(engine.waiting) == [lax]


def test_priority_engine_preempts_the_lax_request_not_the_last_admitted():
    """8 usable blocks: two 64-token prompts take 4 each; the next token needs a 5th block. FCFS preempts the one
    admitted last (the urgent one: both arrived together, the lax one was queued first); the priority policy admits
    the urgent one first and preempts the lax one."""
    outcomes = {}
    for policy in ("fcfs", "priority"):
        engine = engine_with(policy, max_model_len=128, num_gpu_blocks_override=9)
        lax, urgent = Sequence(64, 10), Sequence(64, 10)
        lax.priority, urgent.priority = 1, 0
        engine.add_request(lax, arrival=0.0)
        engine.add_request(urgent, arrival=0.0)
        engine.step()
        engine.step()
        assert engine.num_preemptions == 1
        outcomes[policy] = ("lax" if lax.num_preemptions else "urgent", engine.running)
        assert outcomes[policy][1] == [urgent if lax.num_preemptions else lax]
    assert outcomes["fcfs"][0] == "urgent" and outcomes["priority"][0] == "lax"


@pytest.mark.parametrize("policy, survivor", [("fcfs", 1), ("priority", 0)])
def test_a_victim_scheduled_earlier_in_the_step_gives_its_tokens_back(policy, survivor):
    """The lax request runs first in the batch and is scheduled for this step before the urgent one needs a 5th
    block: vLLM's priority policy preempts it anyway and takes its token back out of the step; FCFS preempts the
    urgent one, admitted last."""
    engine = engine_with(policy, max_model_len=128, num_gpu_blocks_override=9)  # 8 usable blocks of 16 tokens
    lax = Sequence(48, 40)
    lax.priority = 1
    engine.add_request(lax, arrival=0.0)
    engine.step()
    urgent = Sequence(60, 40)
    engine.add_request(urgent, arrival=engine.clock)
    for _ in range(20):  # the 5th block is needed after 5 decode steps
        engine.step()
        if engine.num_preemptions:
            break
    assert [s.priority for s in engine.running] == [survivor]
    assert engine.last_num_scheduled_tokens == 1  # the survivor's one decode token, nothing of the victim's


def test_the_priority_field_is_an_integer_defaulting_to_0():
    assert parse_generation({"priority": -3}, []).priority == -3
    assert parse_generation({}, []).priority == 0
    with pytest.raises(ApiError, match="priority"):
        parse_generation({"priority": "high"}, [])
