"""vllm_stress.simulator.api.parsing: request validation with vLLM's statuses, messages and length rules (the same answers
over HTTP: test_simulator_http.py)."""

import json

import pytest

from vllm_stress.simulator.api.parsing import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    check_model,
    error_body,
    parse_generation,
    parse_json,
    parse_messages,
    parse_prompts,
    resolve_max_tokens,
)
from vllm_stress.simulator.model.errors import ApiError


def refusal(call, *args) -> ApiError:
    with pytest.raises(ApiError) as error:
        call(*args)
    return error.value


def test_errors_have_the_nested_openai_shape():
    error = refusal(parse_json, b"{not json")
    assert error.status == 400 and error.message.startswith("JSON decode error: ")
    body = json.loads(error_body(error))
    assert body == {"error": {"message": error.message, "type": "BadRequestError", "param": None, "code": 400}}
    assert refusal(parse_json, b"[1]").message == "Input should be a valid dictionary or object to extract fields from"
    assert parse_json(b'{"a": 1}') == {"a": 1}


def test_an_unknown_model_is_a_404_and_no_model_is_fine():
    error = refusal(check_model, {"model": "other"}, "m")
    assert (error.status, error.param, error.message) == (404, "model", "The model `other` does not exist.")
    assert json.loads(error_body(error))["error"]["type"] == "NotFoundError"
    check_model({}, "m")
    check_model({"model": "m"}, "m")
    assert refusal(check_model, {"model": 5}, "m").message == "body.model: Input should be a valid str, got 5"


def test_messages_keep_their_text_parts():
    content = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "b"}]
    messages = [{"role": "system", "content": None}, {"role": "user", "content": content}]
    assert parse_messages({"messages": messages}) == [("system", ""), ("user", "a\nb")]


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (None, "body.messages: Field required (a non-empty list)"),
        ([], "body.messages: Field required (a non-empty list)"),
        ([{"content": "x"}], "body.messages: each message needs a string 'role'"),
        ([{"role": "user", "content": 3}], "body.messages: 'content' must be a string or a list of parts"),
    ],
)
def test_bad_messages(messages, message):
    error = refusal(parse_messages, {"messages": messages})
    assert (error.status, error.param, error.message) == (400, "messages", message)


def test_prompts_are_strings_or_token_lists_alone_or_in_a_list():
    assert parse_prompts({"prompt": "x"}) == ["x"]
    assert parse_prompts({"prompt": [1, 2]}) == [[1, 2]]
    assert parse_prompts({"prompt": ["a", [3]]}) == ["a", [3]]
    for bad in (None, [], [True], [1, "a"], 5):
        assert refusal(parse_prompts, {"prompt": bad}).param == "prompt", bad


def test_generation_defaults_and_max_completion_tokens_first():
    request = parse_generation({}, ["x"])
    assert (request.stream, request.include_usage, request.max_tokens, request.min_tokens, request.n) == (
        False,
        False,
        None,
        0,
        1,
    )
    request = parse_generation({"max_tokens": 5, "max_completion_tokens": 7}, ["x"])
    assert (request.max_tokens, request.max_tokens_field) == (7, "max_completion_tokens")
    options = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    request = parse_generation(options, ["x"])
    assert request.stream and request.include_usage and request.continuous_usage


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"stream_options": {"include_usage": True}}, "Stream options can only be defined when `stream=True`."),
        ({"n": 0}, "n must be at least 1, got 0."),
        ({"max_tokens": 0}, "max_tokens must be at least 1, got 0."),
        ({"max_tokens": True}, "body.max_tokens: Input should be a valid int, got True"),
        ({"ignore_eos": "yes"}, "body.ignore_eos: Input should be a valid bool, got 'yes'"),
        ({"stream_interval": 0}, "stream_interval must be at least 1, got 0."),
    ],
)
def test_bad_generation_fields(body, message):
    assert refusal(parse_generation, body, ["x"]).message == message


def test_the_output_budget_is_clamped_to_the_room_left():
    chat = parse_generation({}, ["x"])
    assert resolve_max_tokens(chat, 96, 4096, None) == 4000  # chat: all the room left
    completions = parse_generation({}, ["x"])
    assert resolve_max_tokens(completions, 96, 4096, COMPLETIONS_DEFAULT_MAX_TOKENS) == 16
    assert resolve_max_tokens(parse_generation({"max_tokens": 200}, ["x"]), 4000, 4096, None) == 96


def test_a_prompt_without_room_or_a_budget_over_the_context_is_a_400():
    error = refusal(resolve_max_tokens, parse_generation({}, ["x"]), 4096, 4096, None)
    assert error.param == "input_tokens" and "maximum context length is 4096 tokens" in error.message
    assert "your prompt contains 4096 input tokens" in error.message
    error = refusal(resolve_max_tokens, parse_generation({"max_completion_tokens": 5000}, ["x"]), 10, 4096, None)
    assert error.message == "max_completion_tokens=5000 cannot be greater than max_model_len=4096."
