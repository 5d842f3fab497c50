"""What the simulated model "generates": deterministic pseudo-words, and when it samples EOS
(docs/concepts/simulator.md, section 8)."""

from __future__ import annotations

import math
import random
import sys
from array import array

from .profiles import Profile

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]
WORDS: tuple[str, ...] = tuple(
    a + b + ("n" if (i + j) % 3 == 0 else "") for i, a in enumerate(_SYLLABLES) for j, b in enumerate(_SYLLABLES)
)[:4096]
WORD_BYTES: tuple[bytes, ...] = tuple((" " + word).encode() for word in WORDS)

_STREAM_MASK = (1 << 16) - 1
_WORD_MASK = len(WORDS) - 1  # 4,096 words: the low 12 bits of a stream value pick one, all equally likely
# the word stream: 65,536 seeded 16-bit values, made in one call (drawing them one by one took 40 ms of every
# simulator's start); read as little-endian on every machine
_STREAM = array("H", random.Random(20240601).randbytes(2 * (_STREAM_MASK + 1)))
if sys.byteorder == "big":
    _STREAM.byteswap()


def word_index(offset: int, position: int) -> int:
    """Index in ``WORDS`` of the token at ``position`` of a text starting at ``offset`` of the word stream."""
    return _STREAM[(offset + position) & _STREAM_MASK] & _WORD_MASK


def text_bytes(offset: int, start: int, end: int) -> bytes:
    """UTF-8 text of generated word tokens ``start`` .. ``end - 1``."""
    return b"".join([WORD_BYTES[_STREAM[(offset + i) & _STREAM_MASK] & _WORD_MASK] for i in range(start, end)])


def sample_output_length(rng: random.Random, profile: Profile) -> int:
    mean = profile.output_len_mean
    if profile.output_len_distribution == "fixed":
        value = mean
    elif profile.output_len_distribution == "exponential":
        value = rng.expovariate(1.0 / mean)
    else:
        sigma = profile.output_len_sigma
        value = rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)
    return max(1, round(value))


def plan_sequence(rng: random.Random, profile: Profile, min_tokens: int, ignore_eos: bool) -> tuple[int, int]:
    """Return ``(text_offset, stop_after)`` for one sequence; ``stop_after`` 0 means EOS never ends it."""
    offset = rng.randrange(_STREAM_MASK + 1)
    if ignore_eos:
        return offset, 0
    return offset, max(sample_output_length(rng, profile), min_tokens + 1)
