"""Structured outputs: the client's schema pool and answer verdicts, the simulator's schema answers and grammar costs
(compile once per schema text, passed over while compiling, a mask cost per structured sequence and step)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from jsonschema import Draft202012Validator

from benchmarks.harness import read_rows
from tests.helpers import REPO
from vllm_stress.analysis.features.structured_levels import structured_blocks, structured_stats
from vllm_stress.analysis.report.render import Table
from vllm_stress.client.structured import (
    CUT,
    INVALID,
    VALID,
    JsonSchema,
    SchemaPool,
    chat_fields,
    completion_fields,
    judge,
    read_schemas,
)
from vllm_stress.core import schema
from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.sequence import Sequence
from vllm_stress.simulator.model.errors import ApiError
from vllm_stress.simulator.model.grammar import answer_tokens, json_reply, minimal_instance, request_schema
from vllm_stress.simulator.model.profiles import load_profile

ORDER = {
    "type": "object",
    "properties": {
        "customer": {"type": "string"},
        "items": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "properties": {"sku": {"$ref": "#/$defs/sku"}, "quantity": {"type": "integer", "minimum": 3}},
                "required": ["sku", "quantity"],
            },
        },
        "priority": {"enum": ["low", "high"]},
        "gift": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
        "note": {"type": "string", "minLength": 4},
    },
    "required": ["customer", "items", "priority", "gift", "ratio", "note"],
    "$defs": {"sku": {"type": "string", "maxLength": 8}},
}


def text_of(tokens: tuple[bytes, ...]) -> str:
    """An answer's text from the simulator's tokens (JSON string content)."""
    return json.loads(b'"' + b"".join(tokens) + b'"')


def test_the_simulators_answer_is_valid_and_padded_to_the_target():
    minimal = minimal_instance(ORDER)
    Draft202012Validator(ORDER).validate(json.loads(json.dumps(minimal).replace("<pad>", "")))
    assert minimal["items"] == [{"sku": "", "quantity": 3}] * 2 and minimal["ratio"] == 0.5
    short, long = answer_tokens(ORDER, 1), answer_tokens(ORDER, 300)
    assert len(long) == 300 and len(short) < 300  # padded where the schema lets a string grow; never below minimal
    for tokens in (short, long):
        answer = json.loads(text_of(tokens))
        Draft202012Validator(ORDER).validate(answer)
    assert len(json.loads(text_of(long))["customer"].split()) == 300 - len(short)
    reply = json_reply(ORDER, 302)
    assert reply.length == 301 and reply.grammar == json.dumps(ORDER)  # its EOS within max_tokens


def test_the_simulator_reads_the_schema_where_vllm_does():
    wrapped = {"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER}}
    assert request_schema({"response_format": wrapped}) == ORDER
    assert request_schema({"structured_outputs": {"json": ORDER}}) == ORDER
    assert request_schema({"structured_outputs": {"json": json.dumps(ORDER)}}) == ORDER
    assert request_schema({"response_format": {"type": "json_object"}}) == {"type": "object"}
    assert request_schema({"response_format": {"type": "text"}}) is None and request_schema({}) is None
    with pytest.raises(ApiError):
        request_schema({"structured_outputs": {"json": "{not json"}})


def test_the_client_sends_what_vllm_takes_and_judges_each_answer(tmp_path):
    (tmp_path / "order.json").write_text(json.dumps(ORDER))
    (tmp_path / "b.json").write_text('{"type": "object", "properties": {"x": {"type": "integer"}}}')
    pool = SchemaPool(read_schemas(str(tmp_path)), share=1.0, new_share=0.0, seed=1)
    drawn = [pool.next() for _ in range(4)]
    assert [(s.id, s.first_use) for s in drawn if s] == [("b", True), ("order", True), ("b", False), ("order", False)]
    schema = drawn[1]
    assert schema is not None
    assert chat_fields(schema)["response_format"]["json_schema"] == {"name": "order", "schema": ORDER}
    assert completion_fields(schema) == {"structured_outputs": {"json": ORDER}}
    valid = text_of(answer_tokens(ORDER, 40))
    assert judge(schema, valid, "stop") == VALID
    assert judge(schema, valid, "length") == VALID  # whole, though it ended at max_tokens
    assert judge(schema, valid[:-3], "length") == CUT
    assert judge(schema, valid[:-3], "stop") == INVALID
    assert judge(schema, json.dumps({"customer": 1}), "stop") == INVALID  # JSON, not the schema's


def test_new_schemas_rename_a_property_and_shares_are_drawn():
    pool = SchemaPool([("order", ORDER)], share=0.5, new_share=0.5, seed=3)
    drawn = [pool.next() for _ in range(400)]
    schemas = [s for s in drawn if s is not None]
    new = [s for s in schemas if s.id != "order"]
    assert 150 < len(schemas) < 250 and 0.3 < len(new) / len(schemas) < 0.7
    assert all(s.first_use for s in new) and len({s.id for s in new}) == len(new)
    renamed = new[0].body
    assert "customer" not in renamed["properties"] and renamed["required"][0] in renamed["properties"]
    assert renamed["properties"][renamed["required"][0]] == ORDER["properties"]["customer"]
    with pytest.raises(ValueError, match="top-level property"):
        SchemaPool([("list", {"type": "array"})], share=1.0, new_share=0.1, seed=0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        SchemaPool([("order", ORDER)], share=1.5, new_share=0.0, seed=0)


def test_a_bad_schema_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "bad.json").write_text('{"type": 5}')
    with pytest.raises(ValueError, match="bad.json"):
        read_schemas(str(tmp_path / "bad.json"))
    with pytest.raises(ValueError, match="no \\*.json"):
        read_schemas(str(tmp_path / "nothing")) if (tmp_path / "nothing").mkdir() is None else None


def structured(prompt: int, tokens: int, grammar: str = "") -> Sequence:
    seq = Sequence(prompt, tokens, stop_after=0)
    seq.grammar = grammar
    return seq


def test_a_new_schema_compiles_once_while_other_requests_pass_it():
    engine = Engine(load_profile("cpu-tiny", {"jitter": 0.0, "grammar_compile_s": 0.5, "grammar_mask_s": 0.0}))
    first, plain, second = structured(64, 4, "s"), structured(64, 4), structured(64, 4, "s")
    engine.add_request(first, arrival=0.0)
    engine.add_request(plain, arrival=0.0)
    while engine.has_work:
        engine.step()
        if engine.clock > 0.2 and second.arrival == 0.0:
            engine.add_request(second, arrival=engine.clock)  # the same schema while it still compiles
    assert plain.finish_reason == "length" and plain.first_token is not None and plain.first_token < 0.5
    assert first.first_scheduled is not None and first.first_scheduled >= 0.5
    assert second.first_scheduled is not None and 0.5 <= second.first_scheduled < 0.5 + 0.2  # the same compile
    assert engine.grammars.compiles == 1


def test_the_mask_costs_each_structured_sequence_every_step():
    def decode_time(grammar: str, mask_s: float) -> float:
        engine = Engine(load_profile("cpu-tiny", {"jitter": 0.0, "grammar_mask_s": mask_s}))
        seqs = [structured(32, 20, grammar) for _ in range(4)]
        engine.add_request(*seqs, arrival=0.0)
        while engine.has_work:
            engine.step()
        return seqs[0].decode_time()

    plain = decode_time("", 0.001)
    assert decode_time("s", 0.0) == pytest.approx(plain)
    assert decode_time("s", 0.001) == pytest.approx(plain + 19 * 4 * 0.001)  # 19 decode steps, 4 masks each


def test_a_tool_schema_is_judged_by_the_same_rule():
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = JsonSchema("get_weather", parameters, False)
    assert judge(tool, '{"city": "Oslo"}', "tool_calls") == VALID
    assert judge(tool, '{"town": "Oslo"}', "tool_calls") == INVALID


def ended_rows() -> pd.DataFrame:
    """Level 4: six structured requests (two first uses, one cut, one invalid, one failed) and two plain ones."""
    rows = [
        # users, ok, measured, schema_id, first use, verdict, ttft, tpot
        (4, True, True, "a", 1, "valid", 0.50, 0.020),
        (4, True, True, "b-x1", 1, "valid", 0.70, 0.022),
        (4, True, True, "a", 0, "valid", 0.10, 0.021),
        (4, True, True, "a", 0, "cut", 0.12, 0.023),
        (4, True, True, "a", 0, "invalid", 0.14, 0.025),
        (4, False, False, "a", 0, "", None, None),
        (4, True, True, "", None, "", 0.09, 0.010),
        (4, True, True, "", None, "", 0.11, 0.012),
    ]
    columns = ["users", "ok", "measured", "schema_id", "schema_first_use", "answer_valid", "ttft_s", "tpot_s"]
    return pd.DataFrame(rows, columns=columns)


def test_the_report_counts_verdicts_and_splits_ttft_by_first_use():
    stats = structured_stats(ended_rows(), pd.Index([4, 8], name="users"))
    level = stats.loc[4]
    assert [level[f] for f in ("structured_requests", "answers_valid", "answers_cut", "answers_invalid")] == [
        5,
        3,
        1,
        1,
    ]
    assert level["validity_rate"] == pytest.approx(0.6) and level["schema_first_uses"] == 2
    assert level["ttft_new_schema_p50_s"] == pytest.approx(0.60) and level["ttft_cached_schema_p50_s"] == 0.12
    assert level["tpot_structured_p50_s"] == 0.022 and level["tpot_unconstrained_p50_s"] == pytest.approx(0.011)
    assert stats.loc[8, "structured_requests"] == 0 and np.isnan(stats.loc[8, "validity_rate"])


def test_without_a_mixed_run_the_tpot_is_compared_with_a_baseline_config_by_level():
    level = {"users": 4, "structured_requests": 5, "answers_valid": 3, "answers_invalid": 1, "answers_cut": 1}
    level |= {"validity_rate": 0.6, "schema_first_uses": 2, "ttft_new_schema_p50_s": 0.6}
    level |= {"ttft_cached_schema_p50_s": 0.12, "tpot_structured_p50_s": 0.03, "tpot_unconstrained_p50_s": None}
    configs = {
        "json": {"levels": [level]},
        "plain": {"levels": [{"users": 4, "structured_requests": 0, "tpot_p50_s": 0.02}]},
    }
    blocks = structured_blocks("json", configs)
    table = blocks[-1]
    assert isinstance(table, Table) and table.rows[0][-3:] == ["30.0 ms", "20.0 ms", "1.50x"]
    assert "baseline plain" in blocks[1].text  # type: ignore[union-attr]
    assert structured_blocks("plain", configs) == []


COMPILE_S = 0.3  # the simulated grammar compile of the whole run below


def test_a_mixed_run_against_the_simulator_is_validated_and_reported(scenarios, tmp_path):
    """Half the requests carry a schema of the shipped pool, a third of those a new variant: every structured
    answer is valid and ends with EOS within max_tokens, no new schema is answered before its compile, and the report
    has the structured table with the level's unconstrained TPOT."""
    code = scenarios(
        [
            "run",
            "--scenario",
            "smoke",
            "--out",
            str(tmp_path),
            "--output-tokens",
            "64",
            f"--simulator-arg=--set=grammar_compile_s={COMPILE_S}",
            "--simulator-arg=--set=grammar_mask_s=0.0005",
            f"--locust-arg=--json-schema={REPO / 'scenarios' / 'data' / 'schemas'}",
            "--locust-arg=--json-schema-share=0.5",
            "--locust-arg=--json-schema-new-share=0.3",
        ]
    )
    assert code == 0
    rows = [row for row in read_rows(tmp_path / "run-1" / schema.REQUESTS_FILE) if row["ok"] == "1"]
    structured = [row for row in rows if row["schema_id"]]
    plain = [row for row in rows if not row["schema_id"] and not row["canary"]]  # canaries: their own lengths
    assert structured and plain
    assert all(row["answer_valid"] == "" and row["completion_tokens"] == "64" for row in plain)
    for row in structured:  # the ticket's summary is padded to max_tokens; the order's strings are bounded
        assert (row["answer_valid"], row["finish_reason"]) == ("valid", "stop"), row
        tokens = int(row["completion_tokens"])
        assert (tokens == 63) if row["schema_id"].startswith("ticket") else (30 < tokens < 63), row
    new = [row for row in structured if row["schema_id"] not in ("order", "ticket")]
    assert new and all(row["schema_first_use"] == "1" and float(row["ttft_s"]) >= COMPILE_S for row in new)
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    levels = [level for level in summary["levels"] if level["structured_requests"]]
    assert levels and all(level["validity_rate"] == 1.0 for level in levels)
    assert all(level["tpot_unconstrained_p50_s"] is not None for level in levels)
    assert "## Structured outputs" in (tmp_path / "report" / "report.md").read_text()
