"""vllm_stress.simulator.model.sampling: the pseudo-words the simulator generates and the EOS position it draws."""

import random
import statistics

import pytest

from vllm_stress.simulator.model.profiles import load_profile
from vllm_stress.simulator.model.sampling import (
    WORD_BYTES,
    WORDS,
    plan_sequence,
    sample_output_length,
    text_bytes,
    word_index,
)

PROFILE = load_profile("cpu-tiny")


@pytest.mark.product_free
def test_words_are_distinct_lower_case_ascii_needing_no_escape():
    assert len(WORDS) == len(set(WORDS)) == 4096
    assert all(word.isascii() and word.isalpha() and word.islower() for word in WORDS)
    assert WORD_BYTES[7] == b" " + WORDS[7].encode()


def test_a_text_is_the_word_stream_from_its_offset_and_wraps_around():
    offset = 65530  # near the end of the 65,536-word stream
    expected = b"".join(WORD_BYTES[word_index(offset, i)] for i in range(3, 12))
    assert text_bytes(offset, 3, 12) == expected and len(expected.split()) == 9
    assert word_index(offset, 10) == word_index(offset + 65536, 10) == word_index(offset - 65536 + 10, 0)
    assert text_bytes(offset, 0, 4) + text_bytes(offset, 4, 9) == text_bytes(offset, 0, 9)


@pytest.mark.parametrize(("distribution", "sigma"), [("lognormal", 0.8), ("exponential", 0.0)])
def test_output_lengths_have_the_profiles_mean(distribution, sigma):
    profile = PROFILE.replace(output_len_distribution=distribution, output_len_mean=200.0, output_len_sigma=sigma)
    rng = random.Random(3)
    lengths = [sample_output_length(rng, profile) for _ in range(20_000)]
    assert statistics.fmean(lengths) == pytest.approx(200, rel=0.03) and min(lengths) >= 1
    spread = statistics.pstdev(lengths) / statistics.fmean(lengths)  # exponential: 1; lognormal: sqrt(e^s^2 - 1)
    assert spread == pytest.approx(1.0 if distribution == "exponential" else 0.947, rel=0.1)


def test_a_fixed_length_is_the_mean_and_never_zero():
    rng = random.Random(1)
    assert sample_output_length(rng, PROFILE.replace(output_len_distribution="fixed", output_len_mean=37.0)) == 37
    assert sample_output_length(rng, PROFILE.replace(output_len_distribution="fixed", output_len_mean=0.2)) == 1


def test_eos_comes_after_min_tokens_never_with_ignore_eos_and_the_seed_fixes_it():
    fixed = PROFILE.replace(output_len_distribution="fixed", output_len_mean=3.0)
    offset, stop_after = plan_sequence(random.Random(5), fixed, min_tokens=10, ignore_eos=False)
    assert stop_after == 11 and 0 <= offset < 65536
    assert plan_sequence(random.Random(5), fixed, min_tokens=0, ignore_eos=False) == (offset, 3)
    assert plan_sequence(random.Random(5), fixed, min_tokens=0, ignore_eos=True) == (offset, 0)
    assert plan_sequence(random.Random(6), fixed, min_tokens=0, ignore_eos=False)[0] != offset
