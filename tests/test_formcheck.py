"""vllm_stress.webui.formcheck: the web UI's start form, checked before a run starts with the command line's own
one-line errors (a run refused from the form in a browser: test_webui.py)."""

from types import SimpleNamespace

import pytest

from tests.helpers import parsed_options
from vllm_stress.scenarios.shapes.levels import RAMP_DEFAULTS
from vllm_stress.scenarios.shapes.shape import StepRampShape
from vllm_stress.webui.formcheck import form_error


def environment(shape_class=None):
    """A master's environment as /swarm sees it: the suite's options, with the ramp's when the shape is loaded."""
    options = parsed_options()
    if shape_class is not None:
        options.levels, options.step_time = RAMP_DEFAULTS["levels"], RAMP_DEFAULTS["step-time"]
        for flag in ("max-step-time", "warmup", "cooldown", "ramp-time"):
            setattr(options, flag.replace("-", "_"), float(RAMP_DEFAULTS[flag]))
    return SimpleNamespace(parsed_options=options, shape_class=shape_class)


def test_a_good_form_starts():
    form = {"host": "http://127.0.0.1:8000", "user_count": "4", "input_tokens": "128", "request_timeout": "30"}
    assert form_error(environment(), form) == ""
    assert form_error(environment(StepRampShape), form | {"levels": "2,4", "step_time": "auto"}) == ""


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"input_tokens": "many"}, "argument --input-tokens: invalid int value: 'many'"),
        ({"request_timeout": "soon"}, "argument --request-timeout: invalid float value: 'soon'"),
        ({"input_tokens": "0"}, "--input-tokens must be at least 1, got 0"),
        (
            {"input_tokens": "64", "prefix_tokens": "64"},
            "--prefix-tokens must be at least 0 and less than --input-tokens (64), got 64",
        ),
    ],
)
def test_a_bad_value_is_the_command_lines_error(form, error):
    assert form_error(environment(), form) == error


def test_the_shape_checks_its_own_options():
    assert form_error(environment(StepRampShape), {"levels": "2,x"}) == (
        "--levels must be comma-separated whole numbers, got '2,x'"
    )
    assert form_error(environment(StepRampShape), {"warmup": "-1"}) == (
        "--warmup must be a number of seconds, at least 0, got -1.0"
    )
    assert form_error(environment(), {"levels": "2,x"}) == ""  # no shape: not a field of this run


def test_locusts_own_fields_are_left_to_it_and_the_running_options_untouched():
    env = environment()
    assert form_error(env, {"user_count": "lots", "run_time": "1h", "input_tokens": "0"}) != ""
    assert form_error(env, {"user_count": "lots", "run_time": "1h"}) == ""
    assert env.parsed_options.input_tokens == parsed_options().input_tokens  # the check worked on a copy
    assert form_error(SimpleNamespace(parsed_options=None, shape_class=None), {"input_tokens": "0"}) == ""
