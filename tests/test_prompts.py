"""Prompt sizing against a tokenizer, and the length distributions (no server needed)."""

import statistics

import pandas as pd
import pytest

from vllm_stress.client.prompts import WORDS, Workload, load_dataset, single_token_words


class SplittingTokenizer:
    """A tokenizer that splits some words in two, counted the way /tokenize answers (with a template overhead)."""

    url = "test"
    chat = True

    def __init__(self, split: set[str], overhead: int) -> None:
        self.split, self.overhead, self.calls = split, overhead, 0

    def count(self, text: str) -> int:
        self.calls += 1
        return self.overhead + sum(2 if w in self.split else 1 for w in text.split())


def test_single_token_words_drop_the_split_ones():
    tokenizer = SplittingTokenizer({"world", "castle", "the"}, overhead=7)
    words = single_token_words(tokenizer, WORDS, overhead=7)
    assert set(WORDS) - set(words) == {"world", "castle", "the"}
    assert tokenizer.calls < 60


def test_prompts_have_the_exact_length_and_differ():
    workload = Workload(2048, 512, words=WORDS, overhead=7, seed=1)
    tokenizer = SplittingTokenizer(set(), overhead=7)
    specs = [workload.next_request() for _ in range(5)]
    assert all(tokenizer.count(s.text) == 2048 == s.target_prompt_tokens for s in specs)
    assert len({s.text[:60] for s in specs}) == 5  # no shared prefix for the prefix cache
    assert all(s.max_tokens == 512 for s in specs)


@pytest.mark.parametrize(("dist", "spread"), [("uniform", 0.2), ("normal", 0.1)])
def test_length_distributions(dist, spread):
    workload = Workload(1000, 100, dist=dist, spread=spread, seed=2)
    lengths = [workload.length(1000) for _ in range(4000)]
    assert statistics.mean(lengths) == pytest.approx(1000, rel=0.02)
    if dist == "uniform":
        assert min(lengths) >= 800 and max(lengths) <= 1200 and max(lengths) > 1150
    else:
        assert statistics.stdev(lengths) == pytest.approx(100, rel=0.1)


def test_dataset_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "Hello"}\n\n{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 7}\n')
    specs = load_dataset(str(path))
    assert [(s.text, s.max_tokens) for s in specs] == [("Hello", 0), ("Hi", 7)]
    path.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match=r"d.jsonl:2"):
        load_dataset(str(path))


def test_a_parquet_dataset_reads_as_its_json_lines(tmp_path):
    """A Parquet table (the Hugging Face Hub's format) with the JSON lines' columns gives the same prompts; a row
    without a prompt is named by its number."""
    rows = [{"prompt": "Hello", "max_tokens": None}, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 7}]
    pd.DataFrame(rows).to_parquet(tmp_path / "d.parquet")
    specs = load_dataset(str(tmp_path / "d.parquet"))
    assert [(s.text, s.max_tokens) for s in specs] == [("Hello", 0), ("Hi", 7)]
    pd.DataFrame([{"prompt": "ok"}, {"prompt": None}]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad.parquet: row 2: not a prompt record"):
        load_dataset(str(tmp_path / "bad.parquet"))
    (tmp_path / "cut.parquet").write_bytes((tmp_path / "d.parquet").read_bytes()[:40])
    with pytest.raises(ValueError, match=r"cut.parquet: not a readable Parquet file"):
        load_dataset(str(tmp_path / "cut.parquet"))


def test_num_prompts_draws_the_same_sample_in_every_process(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(f'{{"prompt": "prompt {n}"}}\n' for n in range(500)))
    sample = [spec.text for spec in load_dataset(str(path), num_prompts=20)]
    assert len(set(sample)) == 20 and sample == sorted(sample, key=lambda text: int(text.split()[1]))  # file order
    assert sample == [spec.text for spec in load_dataset(str(path), num_prompts=20)]  # seeded, not per process
    assert sample != [f"prompt {n}" for n in range(20)]  # drawn from the whole file
    assert len(load_dataset(str(path), num_prompts=0)) == len(load_dataset(str(path), num_prompts=501)) == 500
