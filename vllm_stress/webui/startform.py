"""The suite's start form at /llm/start: the fields a first run needs at the top with plain labels, then each
capability's options in its own collapsed group, titled and ordered as the capability registry says. It posts to
Locust's /swarm, where ``formcheck`` checks it first. Locust's own form lists none of the suite's options (they are in
argparse groups, which its "Custom parameters" accordion leaves out) and starts a run with the command line's."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import locust
from flask import Blueprint, Response, jsonify, render_template_string, request
from locust.argument_parser import LocustArgumentParser

from vllm_stress.client import features
from vllm_stress.webui.formcheck import Field, FormError, StartForm, apply

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.web import WebUI

ROUTE = "/llm/start"
FIRST_RUN = {  # dest -> plain label: the suite's fields a first run sets, in this order
    "model": "Model (empty: the first one the server lists)",
    "input_tokens": "Input tokens per request",
    "output_tokens": "Output tokens per request",
    "levels": "Levels (users at each step)",
    "shape": "Shape",
    "step_time": "Hold of each level (s, or auto)",
    "slo": "SLO (per-request limits, e.g. ttft=2s,tpot=50ms)",
    "traffic_class": "Traffic classes (one a line)",
}
LOCUST_FIRST = {"user_count": "Users", "spawn_rate": "Users started per second", "run_time": "Run time (e.g. 5m)"}


@dataclass(frozen=True)
class Shown:
    """A field as the page shows it: its name in the POST, label, help, input kind and current value."""

    name: str
    label: str
    help: str
    input: str  # text, checkbox, select, textarea or readonly
    value: Any
    choices: tuple[str, ...] = ()


@functools.cache
def suite_parser() -> LocustArgumentParser:
    """A parser with the options every loaded locustfile adds (Locust's init_command_line_parser event), for the
    form: made once, a process's options do not change."""
    parser = LocustArgumentParser(add_help=False)
    locust.events.init_command_line_parser.fire(parser=parser)
    return parser


def shown(field: Field, options: argparse.Namespace, label: str = "") -> Shown:
    action, value = field.action, getattr(options, field.dest, field.action.default)
    if field.kind == features.PATH:
        kind = "readonly"
    elif action.nargs == 0:
        kind = "checkbox"
    elif action.choices is not None:
        kind = "select"
    else:
        kind = "textarea" if field.repeated else "text"
    text: Any = "\n".join(value) if field.repeated else ("" if value is None else value)
    choices = tuple(str(choice) for choice in action.choices or ())
    if choices and action.default is None:  # unset by default: the empty choice leaves it unset
        choices = ("", *choices)
    return Shown(field.flag, label or field.flag, action.help or "", kind, text, choices)


def page_sections(form: StartForm, environment: Environment) -> tuple[list[Shown], list[tuple[str, list[Shown]]]]:
    """The first-run fields and each group's others."""
    options = environment.parsed_options or argparse.Namespace()
    host = Shown("host", "Host (the server's base URL)", "", "text", environment.host or "")
    first = [host]
    if environment.shape_class is None:
        first += [
            Shown(name, label, "", "text", getattr(options, {"user_count": "num_users"}.get(name, name), "") or "")
            for name, label in LOCUST_FIRST.items()
        ]
    by_dest = {field.dest: field for _, fields in form.groups for field in fields}
    first += [shown(by_dest[dest], options, label) for dest, label in FIRST_RUN.items() if dest in by_dest]
    groups = [
        (title, [shown(field, options) for field in fields if field.dest not in FIRST_RUN])
        for title, fields in form.groups
    ]
    return first, [(title, fields) for title, fields in groups if fields]


def template(name: str) -> str:
    return resources.files("vllm_stress.webui").joinpath("templates", name).read_text(encoding="utf-8")


def register(web_ui: WebUI, routes: Blueprint, authenticated: Any) -> None:
    """The form's page on ``routes`` (behind Locust's login when it has one) and its check of every /swarm POST."""
    environment = web_ui.environment
    app = web_ui.app
    assert app is not None  # WebUI makes its Flask app in __init__

    @routes.route(ROUTE)
    @web_ui.auth_required_if_enabled
    def _start_form() -> str:
        first, groups = page_sections(StartForm(suite_parser()), environment)
        return render_template_string(template("start.html"), first=first, groups=groups)

    @app.before_request
    def _check_start_form() -> Response | None:
        if request.method == "POST" and request.path.endswith("/swarm") and authenticated(web_ui):
            try:
                values = StartForm(suite_parser()).check(environment, request.form)
            except FormError as error:
                return jsonify({"success": False, "message": str(error), "host": environment.host})
            apply(environment, values)
        return None
