"""vllm_stress.simulator.model.tokenizer: the simulator's stand-in tokenizer and Llama-3-style chat template — what its
/tokenize counts and its usage reports."""

import zlib
from collections import Counter

import pytest

from vllm_stress.simulator.model.sampling import WORDS
from vllm_stress.simulator.model.tokenizer import BOS_ID, END_HEADER_ID, EOT_ID, START_HEADER_ID, VOCAB_SIZE, Tokenizer

TEXT = "Hello, world!"


def test_a_word_or_a_sign_is_one_token_with_a_stable_id():
    ids = Tokenizer().encode(TEXT, add_special_tokens=False)
    assert ids == [zlib.crc32(token.encode()) % 128000 for token in ("Hello", ",", "world", "!")]
    assert Tokenizer().encode(TEXT) == [BOS_ID, *ids]  # another instance: the same ids, after the BOS
    assert all(token_id < BOS_ID for token_id in ids)  # hashed ids never take a special token's


def test_decoding_puts_back_the_spaces_before_words():
    tokenizer = Tokenizer()
    assert tokenizer.decode(tokenizer.encode(TEXT, add_special_tokens=False)) == TEXT
    # a word after a sign gets one too: the text is not always given back as it was
    assert tokenizer.decode(tokenizer.encode("a b_c (d)")) == "<|begin_of_text|>a b_c( d)"


def test_the_ids_of_the_generated_words_decode_from_the_start():
    tokenizer = Tokenizer()
    ids = [tokenizer.token_id(word) for word in WORDS]
    assert [tokenizer.token_id(tokenizer.token_text(token_id)) for token_id in ids] == ids
    # an id two words hash to decodes to the one registered last; every other word comes back as itself
    shared = {token_id for token_id, count in Counter(ids).items() if count > 1}
    assert all(
        tokenizer.token_text(token_id) == word
        for token_id, word in zip(ids, WORDS, strict=True)
        if token_id not in shared
    )
    with pytest.raises(ValueError, match=f"Token id {VOCAB_SIZE + 5} is out of vocabulary"):
        tokenizer.token_text(VOCAB_SIZE + 5)


def test_the_chat_template_adds_four_tokens_a_message_one_bos_and_three_for_the_prompt():
    tokenizer = Tokenizer()
    text = tokenizer.encode(TEXT, add_special_tokens=False)
    user, assistant = tokenizer.token_id("user"), tokenizer.token_id("assistant")
    assert tokenizer.chat_encode([("user", TEXT)]) == [
        BOS_ID,
        *(START_HEADER_ID, user, END_HEADER_ID, *text, EOT_ID),
        *(START_HEADER_ID, assistant, END_HEADER_ID),
    ]
    two = [("system", "Be brief."), ("user", TEXT)]
    assert len(tokenizer.chat_encode(two, add_generation_prompt=False)) == 1 + (4 + 3) + (4 + 4)
