"""The simulator's engine in virtual time: scheduling rules, KV accounting, prefix caching, step-time anchors, the
MI325X fit and saturation, all without HTTP or wall-clock time."""

import random

import pytest

from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.kvcache import num_gpu_blocks, prompt_block_hashes
from vllm_stress.simulator.engine.sequence import Sequence
from vllm_stress.simulator.engine.steptime import StepTimeModel
from vllm_stress.simulator.engine.virtual import closed_loop
from vllm_stress.simulator.model.profiles import load_profile, parse_assignments, profile_names

# docs/concepts/vllm-scheduler.md §7: decode (1,100-token contexts) at B=1/64/256 and a 2048-token prefill, ms
STEP_ANCHORS = {
    "h100-llama-3.1-8b": (7.5, 10.9, 21.3, 64),
    "mi300x-llama-3.1-8b": (6.4, 8.8, 16.3, 60),
    "mi325x-qwen3-235b-tp8": (21.3, 34.6, 37.2, 51),
}
GUIDE_TABLE = {
    10: 1902,
    50: 6961,
    100: 11198,
}  # the MI325X tuning guide, Qwen3-VL-235B on 8x MI325X, total tok/s at 2048/512


def tiny(**overrides):
    return load_profile("cpu-tiny", {"jitter": 0.0, **overrides})


def run_until_idle(engine, limit=100_000):
    for _ in range(limit):
        if not engine.has_work:
            return
        engine.step()
    raise AssertionError("engine did not drain")


def random_tokens(count, seed):
    return random.Random(seed).choices(range(128000), k=count)


def prompted(token_ids, max_tokens=4, hashed=True):
    """A sequence for ``token_ids`` with its block hashes (block size 16), as the server makes it."""
    return Sequence(len(token_ids), max_tokens, block_hashes=prompt_block_hashes(token_ids, 16) if hashed else ())


def served_alone(engine, seq):
    """Run ``seq`` on an idle engine until it finishes; returns the tokens scheduled by each step."""
    engine.add_request(seq)
    steps = []
    while engine.has_work:
        engine.step()
        steps.append(engine.last_num_scheduled_tokens)
    return steps


def test_profiles_load_and_override():
    assert {"cpu-tiny", "h100-llama-3.1-8b", "mi300x-llama-3.1-8b", "mi325x-qwen3-235b-tp8"} <= set(profile_names())
    profile = load_profile("mi325x-qwen3-235b-tp8", parse_assignments(["mfu=0.4", "max_num_seqs=64"]))
    assert (profile.mfu, profile.max_num_seqs, profile.max_num_batched_tokens) == (0.4, 64, 16384)
    assert profile.served_model_name == "Qwen/Qwen3-VL-235B-A22B-Instruct"
    with pytest.raises(ValueError, match="unknown profile field"):
        parse_assignments(["nonsense=1"])


@pytest.mark.parametrize("name", sorted(STEP_ANCHORS))
def test_step_time_matches_reference_table(name):
    model = StepTimeModel(load_profile(name))
    decode_1, decode_64, decode_256, prefill_2048 = STEP_ANCHORS[name]
    for batch, expected in ((1, decode_1), (64, decode_64), (256, decode_256)):
        assert model.ideal(batch, batch * 1100.5, batch * 1101) * 1000 == pytest.approx(expected, rel=0.03)
    assert model.ideal(2048, 2048 * 1024, 2048) * 1000 == pytest.approx(prefill_2048, rel=0.03)


def test_each_scheduled_sequence_adds_its_host_time_to_a_step():
    plain = StepTimeModel(load_profile("cpu-tiny"))
    per_seq = StepTimeModel(load_profile("cpu-tiny", {"t_per_seq": 0.002}))
    assert per_seq.ideal(8, 8 * 100.5, 8 * 101, 8) == pytest.approx(plain.ideal(8, 8 * 100.5, 8 * 101, 8) + 0.016)


def test_kv_blocks_from_memory():
    # 0.9 x 256 GB - 470 GB / 8 of weights, at 48,128 bytes per token per rank (KV heads replicated at TP 8)
    blocks = num_gpu_blocks(load_profile("mi325x-qwen3-235b-tp8"))
    assert blocks * 16 == pytest.approx((0.9 * 256e9 - 2 * 235e9 / 8) / 48128, rel=0.001)
    with pytest.raises(ValueError, match="cannot hold one request"):
        num_gpu_blocks(tiny(num_gpu_blocks_override=10))


def test_long_prompt_is_chunked_and_first_token_comes_with_last_chunk():
    engine = Engine(tiny(max_model_len=8192))
    seq = Sequence(prompt_len=5000, max_tokens=4)
    engine.add_request(seq)
    chunks = []
    for _ in range(3):
        engine.step()
        chunks.append(engine.last_num_scheduled_tokens)
    assert chunks == [2048, 2048, 904]
    assert seq.num_output == 1 and seq.first_token == engine.clock
    run_until_idle(engine)
    assert (seq.num_output, seq.finish_reason) == (4, "length")


def test_decodes_go_first_and_new_prompts_get_the_rest_of_the_budget():
    engine = Engine(tiny())
    decoding = [Sequence(10, 100) for _ in range(5)]
    for seq in decoding:
        engine.add_request(seq)
    engine.step()
    newcomer = Sequence(3000, 10)
    engine.add_request(newcomer)
    _, outputs = engine.step()
    assert set(outputs) == set(decoding)
    assert newcomer.num_computed == 2048 - 5


def test_max_num_seqs_caps_running_and_fcfs_admission():
    engine = Engine(tiny(max_num_seqs=4))
    seqs = [Sequence(10, 3) for _ in range(10)]
    for seq in seqs:
        engine.add_request(seq)
    engine.step()
    assert engine.running == seqs[:4] and list(engine.waiting) == seqs[4:]
    run_until_idle(engine)
    first_scheduled = [seq.first_scheduled for seq in seqs]
    assert first_scheduled == sorted(first_scheduled)


def test_preemption_recomputes_last_admitted_and_frees_all_blocks():
    engine = Engine(tiny(max_model_len=256, num_gpu_blocks_override=25, max_num_batched_tokens=512))
    seqs = [Sequence(100, 150) for _ in range(4)]
    for seq in seqs:
        engine.add_request(seq)
    checked = False
    for _ in range(400):
        last_admitted = engine.running[-1] if engine.running else None
        engine.step()
        if engine.num_preemptions == 1 and not checked:
            checked = True  # the last admitted goes back to the front of the queue, to be recomputed
            assert engine.waiting[0] is last_admitted and last_admitted.num_computed == 0
            assert last_admitted.num_blocks == 0 and last_admitted.num_preemptions == 1
    assert checked
    assert not engine.has_work
    assert [seq.num_output for seq in seqs] == [150] * 4
    assert engine.kv.free_blocks == engine.kv.usable_blocks


def test_no_admission_in_a_step_that_preempted_and_head_of_line_blocking():
    engine = Engine(tiny(max_model_len=128, num_gpu_blocks_override=9))  # 8 usable blocks of 16 tokens
    first, second = Sequence(64, 10), Sequence(64, 10)
    engine.add_request(first)
    engine.add_request(second)
    engine.step()  # both prompts fill 4 blocks each; each has sampled a token and needs a 5th block
    late = Sequence(1, 10)
    engine.add_request(late)
    engine.step()
    assert engine.num_preemptions == 1 and list(engine.waiting) == [second, late]
    assert engine.running == [first] and late.first_scheduled is None
    engine.step()  # 3 blocks free: not enough for `second` (5), and `late` may not overtake it
    assert list(engine.waiting) == [second, late]
    run_until_idle(engine)
    assert [seq.num_output for seq in (first, second, late)] == [10, 10, 10]


def test_stop_after_and_abort():
    engine = Engine(tiny())
    stops = Sequence(10, 50, stop_after=7)
    aborted = Sequence(10, 50)
    engine.add_request(stops)
    engine.add_request(aborted)
    for _ in range(3):
        engine.step()
    engine.abort(aborted)
    run_until_idle(engine)
    assert (stops.num_output, stops.finish_reason) == (7, "stop")
    assert (aborted.num_output, aborted.finish_reason) == (3, "abort")
    assert stops.arrival <= stops.first_scheduled < stops.first_token <= stops.last_token == stops.finished_at
    assert engine.kv.free_blocks == engine.kv.usable_blocks


def test_the_api_server_hands_requests_over_one_at_a_time():
    engine = Engine(tiny(t_frontend=0.01))
    first = Sequence(10, 2)
    pair = (Sequence(10, 2, index=0), Sequence(10, 2, index=1))  # one request with n=2: one frontend time
    late = Sequence(10, 2)
    engine.add_request(first, arrival=0.0)
    engine.add_request(*pair, arrival=0.0)
    engine.add_request(late, arrival=0.5)  # the API server is idle again by then
    assert [seq.ready for seq in (first, *pair, late)] == pytest.approx([0.01, 0.02, 0.02, 0.51])
    assert engine.step() == (0.0, []) and engine.clock == pytest.approx(0.01)  # idle until the first is handed over
    run_until_idle(engine)
    assert first.first_scheduled == pytest.approx(0.01) and pair[0].first_scheduled >= 0.02
    assert late.first_scheduled == pytest.approx(0.51) and late.queue_time() == pytest.approx(0.0)
    assert late.ttft() == pytest.approx(0.01 + late.prefill_time())  # vLLM's TTFT counts from the HTTP arrival


def test_max_tokens_clamped_to_context():
    engine = Engine(tiny())
    seq = Sequence(4000, 1000)
    engine.add_request(seq)
    run_until_idle(engine)
    assert (seq.num_output, seq.finish_reason) == (96, "length")


@pytest.mark.parametrize("concurrency", sorted(GUIDE_TABLE))
def test_mi325x_fit_reproduces_seed_table(concurrency):
    result = closed_loop(load_profile("mi325x-qwen3-235b-tp8"), concurrency, 2048, 512, requests=5 * concurrency)
    assert result.total_tokens_per_s == pytest.approx(GUIDE_TABLE[concurrency], rel=0.10)
    assert result.output_tokens_per_s == pytest.approx(result.total_tokens_per_s / 5)
    assert result.preemptions == 0 and result.max_waiting <= concurrency


def test_saturation_at_max_num_seqs():
    profile = load_profile("h100-llama-3.1-8b", {"max_num_seqs": 64})
    results = {c: closed_loop(profile, c, 512, 128, requests=6 * c) for c in (32, 64, 128, 256)}
    output = {c: r.output_tokens_per_s for c, r in results.items()}
    assert output[64] > 1.3 * output[32]  # still growing below the cap
    assert output[128] < 1.05 * output[64] and output[256] < 1.05 * output[64]  # flat past it
    assert max(r.max_running for r in results.values()) == 64
    assert results[64].max_waiting < results[128].max_waiting < results[256].max_waiting
    assert results[256].ttft_mean > 1.5 * results[128].ttft_mean > 3 * results[64].ttft_mean


def test_small_kv_cache_preempts_in_closed_loop():
    profile = tiny(max_model_len=1024, num_gpu_blocks_override=80)
    result = closed_loop(profile, 8, 200, 300, requests=32)
    assert result.preemptions > 0
    assert result.completed == 32 and result.output_tokens_per_s > 0


def test_prefix_cache_hit_schedules_only_the_uncached_tail():
    engine = Engine(tiny())
    prompt = random_tokens(1000, seed=1)
    first, second, prefix = prompted(prompt), prompted(prompt), prompted(prompt[:992])
    assert served_alone(engine, first)[0] == 1000
    assert served_alone(engine, second)[0] == 1000 - 992  # 62 full blocks hit; the partial 63rd is computed
    assert second.first_token - second.arrival < 0.2 * (first.first_token - first.arrival)
    # a prompt of only full cached blocks still computes its last token: its last block is recomputed
    assert served_alone(engine, prefix)[0] == 16
    assert [seq.num_cached_tokens for seq in (first, second, prefix)] == [0, 992, 976]
    assert (engine.prefix_cache_queries, engine.prefix_cache_hits) == (1000 + 1000 + 992, 992 + 976)
    assert engine.kv.free_blocks == engine.kv.usable_blocks and engine.kv.usage == 0  # cached blocks count as free


def test_choices_of_one_request_share_the_prompt_blocks_in_the_same_step():
    engine = Engine(tiny())
    prompt = random_tokens(1000, seed=2)
    hashes = prompt_block_hashes(prompt, 16)
    choices = [Sequence(1000, 4, block_hashes=hashes) for _ in range(2)]
    for seq in choices:
        engine.add_request(seq)
    engine.step()  # the first choice registers its blocks when scheduled; the second finds them
    assert engine.last_num_scheduled_tokens == 1000 + 8 and engine.prefix_cache_hits == 992
    assert engine.kv.usable_blocks - engine.kv.free_blocks == 63 + 1


def test_different_prompts_short_prompts_and_partial_prefixes():
    engine = Engine(tiny())
    for seed in (3, 4):
        assert served_alone(engine, prompted(random_tokens(1000, seed)))[0] == 1000
    short = random_tokens(15, seed=5)
    assert [served_alone(engine, prompted(short))[0] for _ in range(2)] == [15, 15]
    assert (engine.prefix_cache_queries, engine.prefix_cache_hits) == (2030, 0)
    shared = random_tokens(500, seed=6)
    served_alone(engine, prompted(shared + random_tokens(300, seed=7)))
    assert served_alone(engine, prompted(shared + random_tokens(300, seed=8)))[0] == 800 - 496  # 31 full blocks


def test_cached_blocks_are_evicted_least_recently_freed_first():
    engine = Engine(tiny(max_model_len=512, num_gpu_blocks_override=33))  # 32 usable blocks
    a, c, big = random_tokens(100, seed=9), random_tokens(100, seed=10), random_tokens(420, seed=11)
    for tokens in (a, c):
        served_alone(engine, prompted(tokens, max_tokens=1))  # 7 blocks each, 6 of them cached
    assert (engine.kv.empty_blocks, len(engine.kv.evictable)) == (32 - 12, 12)
    assert served_alone(engine, prompted(big, max_tokens=1))[0] == 420  # 27 blocks: all of a's and c's last go
    c_again, a_again = prompted(c, max_tokens=1), prompted(a, max_tokens=1)
    served_alone(engine, c_again)
    served_alone(engine, a_again)
    assert (c_again.num_cached_tokens, a_again.num_cached_tokens) == (5 * 16, 0)
    assert engine.kv.free_blocks == engine.kv.usable_blocks


def test_preempted_sequence_finds_its_cached_blocks_again():
    engine = Engine(tiny(max_model_len=128, num_gpu_blocks_override=9))  # 8 usable blocks of 16 tokens
    first, second = prompted(random_tokens(64, seed=13), 10), prompted(random_tokens(64, seed=14), 10)
    engine.add_request(first)
    engine.add_request(second)
    engine.step()
    engine.step()  # first needs a 5th block: second is preempted; its 4 cached blocks are freed, tail first
    assert engine.num_preemptions == 1 and second.num_blocks == 0
    assert len(engine.kv.evictable) == 3 and engine.kv.empty_blocks == 0  # its last block went to first
    while second.num_computed == 0:
        engine.step()
    assert first.finish_reason == "length" and engine.last_num_scheduled_tokens == 65 - 3 * 16
    assert (engine.prefix_cache_queries, engine.prefix_cache_hits) == (128, 0)  # re-admissions are not counted
    run_until_idle(engine)
    assert second.num_output == 10 and engine.kv.free_blocks == engine.kv.usable_blocks


def test_disabled_prefix_caching_keeps_the_old_schedule():
    prompt = random_tokens(1000, seed=12)

    def schedule(profile, hashed):
        engine = Engine(profile)
        steps = [served_alone(engine, prompted(prompt, hashed=hashed)) for _ in range(2)]
        return steps, engine.clock, engine.prefix_cache_queries, engine.prefix_cache_hits

    disabled = tiny(**parse_assignments(["enable_prefix_caching=false"]))
    assert disabled.enable_prefix_caching is False and tiny().enable_prefix_caching is True
    steps, clock, queries, hits = schedule(disabled, hashed=True)
    assert (steps[1][0], queries, hits) == (1000, 0, 0)
    assert schedule(tiny(), hashed=False)[:2] == (steps, clock)  # as an engine without prefix caching
