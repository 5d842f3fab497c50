"""vllm_stress.webui.formcheck: the start form's POST, read as the command line reads it, checked with its rules and
one-line errors, refused whole when it names a path or anything that is no field of the form (a run started from the
form in a browser: test_webui.py; a refused POST that would have sent a file away: test_security.py)."""

import argparse
from types import SimpleNamespace

import configargparse
import pytest
from werkzeug.datastructures import MultiDict

from vllm_stress.client import features, hubdataset, options
from vllm_stress.core.capabilities import CAPABILITIES
from vllm_stress.scenarios.shapes import shape
from vllm_stress.scenarios.shapes.shape import StepRampShape
from vllm_stress.webui.formcheck import LOCUST_FIELDS, FormError, StartForm
from vllm_stress.webui.startform import page_sections


@pytest.fixture(autouse=True)
def no_api_key(monkeypatch):
    """The runs here send no API key (with one the form may not change the host: the last test)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def option_parser(ramp: bool = False) -> configargparse.ArgumentParser:
    """The suite's options (with the step ramp's) on a parser as Locust's event gives them."""
    parser = configargparse.ArgumentParser()
    options.add_arguments(parser)
    if ramp:
        shape.add_options(parser)
    return parser


def environment(ramp: bool = False):
    """A master's environment as /swarm sees it, and the start form of its options."""
    parser = option_parser(ramp)
    env = SimpleNamespace(parsed_options=parser.parse_args([]), shape_class=StepRampShape if ramp else None, host="")
    return env, StartForm(parser)


def check(form: dict, ramp: bool = False) -> dict:
    env, start = environment(ramp)
    return start.check(env, MultiDict(form))


def refusal(form: dict, ramp: bool = False) -> str:
    env, start = environment(ramp)
    before = vars(env.parsed_options).copy()
    with pytest.raises(FormError) as error:
        start.check(env, MultiDict(form))
    assert vars(env.parsed_options) == before  # nothing changed
    return str(error.value)


def test_a_good_form_gives_the_options_typed_as_the_command_line_does():
    form = {
        "host": "http://127.0.0.1:8000",
        "user_count": "4",
        "--input-tokens": "128",
        "--temperature": "",
        "--no-stream": "true",
        "--traffic-class": "chat:weight=3,slo=ttft=2s\n\nbatch:weight=1,input=512",
        "--reasoning-effort": "high",
    }
    assert check(form) == {
        "input_tokens": 128,
        "temperature": None,
        "no_stream": True,
        "traffic_class": ["chat:weight=3,slo=ttft=2s", "batch:weight=1,input=512"],
        "reasoning_effort": "high",
    }
    assert check({"--no-stream": "false", "--traffic-class": ""}) == {"no_stream": False, "traffic_class": []}
    assert check({"--session-primer": "false"}) == {"session_primer": False}  # --x/--no-x: one checkbox, --x
    ramp = check({"--levels": "2,4", "--step-time": "auto", "--slo": "ttft=2s,tpot=50ms"}, ramp=True)
    assert ramp == {"levels": "2,4", "step_time": "auto", "slo": "ttft=2s,tpot=50ms"}


def command_line_error(*args: str) -> str:
    """The command line's own message for ``args`` (argparse's, without the program's name)."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    features.add_arguments(parser)
    with pytest.raises(argparse.ArgumentError) as error:
        parser.parse_args(args)
    return str(error.value)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--input-tokens", "many"), ("--request-timeout", "soon"), ("--thinking", "maybe"), ("--token-dist", "zipf")],
)
def test_a_value_the_parser_refuses_is_the_command_lines_error(flag, value):
    assert refusal({flag: value}) == command_line_error(f"{flag}={value}")


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"--input-tokens": "0"}, "--input-tokens must be at least 1, got 0"),
        (
            {"--input-tokens": "64", "--prefix-tokens": "64"},
            "--prefix-tokens must be at least 0 and less than --input-tokens (64), got 64",
        ),
        ({"--traffic-class": "a:weight=0"}, "--traffic-class: --traffic-class a: weight must be more than 0"),
        (
            {"--cancel-share": "0.1", "--cancel-after": "soon"},
            "--cancel-after 'soon': a delay (2s, 500ms) or a token count (20tokens), above 0",
        ),
        ({"--burstiness": "0"}, "--burstiness 0: above 0"),
        ({"user_count": "lots"}, "Invalid user_count value: 'lots' (must be an integer)"),
        ({"run_time": "soon"}, "Valid run_time formats are : 20, 20s, 3m, 2h, 1h20m, 3h30m10s, etc."),
    ],
)
def test_a_value_the_run_refuses_is_its_one_line_error(form, error):
    assert refusal(form) == error


def test_the_shape_checks_its_own_options_and_the_slo():
    assert refusal({"--levels": "2,x"}, ramp=True) == "--levels must be comma-separated whole numbers, got '2,x'"
    assert refusal({"--warmup": "-1"}, ramp=True) == "--warmup must be a number of seconds, at least 0, got -1.0"
    assert refusal({"--slo": "ttft"}, ramp=True).startswith("--slo: 'ttft' is not NAME=LIMIT")
    assert refusal({"--stop-on": "errors"}, ramp=True).startswith("--stop-on: 'errors' is not NAME>LIMIT")
    assert check({"--stop-on": "errors>5%,saturated"}, ramp=True) == {"stop_on": "errors>5%,saturated"}
    assert "--levels" not in StartForm(option_parser()).fields  # no shape: not a field of this run


@pytest.mark.parametrize(
    "flag", ["--dataset", "--api-key-file", "--results-dir", "--trace", "--json-schema", "--session-trace"]
)
def test_a_path_is_refused_by_flag_and_by_name(flag):
    message = f"{flag} names a file on the master: only its command line or the scenario sets it"
    name = flag.removeprefix("--").replace("-", "_")
    assert refusal({"host": "http://127.0.0.1:9", flag: "/etc/passwd"}) == message
    assert refusal({"host": "http://127.0.0.1:9", name: "/etc/passwd"}) == message


def test_a_hub_dataset_from_the_form_is_refused_and_nothing_is_fetched(monkeypatch):
    """A browser may not make the master download from the internet: ``--dataset hf:ORG/NAME`` and a class's
    ``dataset=hf:...`` are refused like a path, even the command line's own value, and nothing is fetched."""

    def no_download(hub):
        raise AssertionError(f"the form made the master download {hub.text}")

    monkeypatch.setattr(hubdataset, "download", no_download)
    message = "--dataset hf:evil/data: names a dataset the master would download: only its command line or the "
    for name in ("--dataset", "dataset"):
        assert refusal({"host": "http://127.0.0.1:9", name: "hf:evil/data"}).startswith(message)
    env, start = environment()
    env.parsed_options.dataset = "hf:evil/data"  # as the command line gave it: the form still may not post it
    with pytest.raises(FormError, match=r"^--dataset hf:evil/data: names a dataset the master would download"):
        start.check(env, MultiDict({"--dataset": "hf:evil/data"}))
    assert refusal({"--traffic-class": "a:weight=1,dataset=hf:evil/data"}).startswith(
        "--traffic-class: dataset= names a file on the master or a dataset it would download"
    )


def test_every_path_option_is_read_only_and_the_command_line_ones_absent():
    start = StartForm(option_parser(ramp=True))
    paths = {field.dest for field in start.fields.values() if field.kind == features.PATH}
    assert paths == {
        *("agent_task", "api_key_file", "canary_file", "dataset", "json_schema", "results_dir", "session_trace"),
        "trace",
    }
    assert not {"api_key", "server_metrics_url", "metrics_port", "otlp_port", "overwrite", "repeats"} & set(
        start.by_dest
    )


@pytest.mark.parametrize(
    ("form", "error"),
    [
        (
            {"csv_prefix": "/tmp/x"},
            "the start form has no field 'csv_prefix': set it on the command line or in the scenario",
        ),
        ({"--api-key": "k"}, "the start form has no field '--api-key': set it on the command line or in the scenario"),
        ({"input_tokens": "64"}, "the start form posts 'input_tokens' as --input-tokens"),
        (
            {"--traffic-class": "a:weight=1,dataset=/etc/passwd"},
            "--traffic-class: dataset= names a file on the master or a dataset it would download: only its command "
            "line or the scenario sets a class's dataset",
        ),
    ],
)
def test_what_is_no_field_of_the_form_is_refused(form, error):
    assert refusal({"host": "http://127.0.0.1:9", **form}) == error


def test_locusts_own_fields_are_left_to_it():
    env, start = environment()
    assert start.check(env, MultiDict({"user_count": "3", "spawn_rate": "1.5", "run_time": "1m"})) == {}
    assert LOCUST_FIELDS <= start.plain
    assert start.check(
        SimpleNamespace(parsed_options=None, shape_class=None, host=""), MultiDict({"--input-tokens": "8"})
    ) == {"input_tokens": 8}


def test_with_an_api_key_the_host_is_the_command_lines():
    env, start = environment()
    env.host = "http://127.0.0.1:8000"
    assert start.check(env, MultiDict({"host": "http://127.0.0.1:9"})) == {}  # no key: any host
    env.parsed_options.api_key_file = "/run/secrets/key"
    assert start.check(env, MultiDict({"host": "http://127.0.0.1:8000"})) == {}
    with pytest.raises(FormError, match="with an API key the target is the command line's --host"):
        start.check(env, MultiDict({"host": "http://127.0.0.1:9"}))


def test_help_and_form_list_the_groups_in_the_registrys_order():
    parser = option_parser(ramp=True)
    titles = [group.capability.title for group in features.groups(parser)]
    assert titles == [entry.title for entry in CAPABILITIES if entry.title in titles]
    assert {"Load profile", "Traffic classes", "Connection", "Results"} <= set(titles)
    text = parser.format_help()
    assert [text.index(f"\n{title}:\n") for title in titles] == sorted(text.index(f"\n{title}:\n") for title in titles)
    assert [title for title, _ in StartForm(parser).groups] == titles


def test_the_page_posted_back_as_it_is_changes_no_option():
    """Every field of the page, posted as its script posts it (a checkbox as true or false), reads back as the
    options the page was made from: a run started without an edit runs the command line's options."""
    parser = option_parser(ramp=True)
    current = parser.parse_args(["--temperature=0.5", "--no-stream", "--traffic-class=a:weight=1;b:weight=2"])
    env = SimpleNamespace(parsed_options=current, shape_class=StepRampShape, host="http://127.0.0.1:8000")
    start = StartForm(parser)
    first, groups = page_sections(start, env)
    shown = [*first, *(field for _, fields in groups for field in fields)]
    form = MultiDict((field.name, posted(field)) for field in shown if field.input != "readonly")
    values = start.check(env, form)
    assert values and all(values[dest] == getattr(current, dest) for dest in values)
    assert {field.name for field in shown} == {"host", *start.fields}  # every field shown, once


def posted(field) -> str:
    """A field's value as the browser posts it: a checkbox's state, a select's chosen option (the first when the
    value is none of them)."""
    if field.input == "checkbox":
        return str(bool(field.value)).lower()
    if field.input == "select" and str(field.value) not in field.choices:
        return field.choices[0]
    return str(field.value)
