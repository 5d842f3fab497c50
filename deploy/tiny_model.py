"""Build a tiny random-weight Qwen2 chat model for a CPU vLLM: python deploy/tiny_model.py OUTPUT_DIR

Runs in the vLLM venv (it has ``tokenizers``, ``transformers`` and ``torch``). The byte-level BPE tokenizer is
trained on text made of the words of ``vllm_stress/client/prompts.py`` (WORDS), so each word, with or without a leading
space, is one token and an N-word prompt is N tokens. Chat uses the ChatML template. The weights are random:
send ``ignore_eos`` (or ``min_tokens``) to get a fixed output length.
"""

from __future__ import annotations

import random
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from vllm_stress.client.prompts import WORDS  # real-vllm.sh puts the repository on PYTHONPATH (needs only `requests`)

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 1024  # an upper bound: the merges of this small text run out at about 800
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def training_text(words: list[str], lines: int = 4000) -> list[str]:
    """Lines of random words (each word starts lines too, so both spellings get merged), plus punctuation."""
    rng = random.Random(0)
    return [" ".join(rng.choices(words, k=12)) + rng.choice([".", ",", "!", "?", ""]) for _ in range(lines)]


def build_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(training_text(words), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=4096
    )
    fast.chat_template = CHATML
    for word in words:
        assert len(fast.encode(word)) == 1 and len(fast.encode(" " + word)) == 1, f"{word!r} is not one token"
    return fast


def build_model(tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(torch.bfloat16)


def main(out: str) -> None:
    tokenizer = build_tokenizer(WORDS)
    model = build_model(tokenizer)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny Qwen2 model in {out}: {params / 1e6:.1f} M parameters, vocabulary {len(tokenizer)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[0])
    main(sys.argv[1])
