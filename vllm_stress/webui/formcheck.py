"""The web UI's start form, checked before a run starts: which fields a POST to /swarm may name, their values read
as the command line reads them, and the run checked with the command line's rules (``client.checks``, the shape's
``check_options``), each refusal one line. A refused POST changes nothing; an accepted one sets the suite's options
before Locust's /swarm handler starts the run with its own fields.

The form posts the suite's options by their flag (``--input-tokens``), which Locust's handler leaves alone, and
Locust's own fields by name (``host``, ``user_count``). An option that names a file on the master (``PATH``: a
dataset, the API key's file, the results folder; or a Hub dataset the master would download, ``hf:ORG/NAME``) or is
set on the command line only is no field: the form shows the first read-only, and a POST naming either, whatever its
value, or any option of Locust's own, is refused. docs/concepts/failures.md says why.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from locust.util.timespan import parse_timespan

from vllm_stress.client import features
from vllm_stress.client.checks import StopTarget, validate
from vllm_stress.client.classes import declared
from vllm_stress.client.hubdataset import is_hub_id
from vllm_stress.core.classes import TrafficClass

if TYPE_CHECKING:
    from locust.env import Environment
    from werkzeug.datastructures import MultiDict

# the fields of Locust's own form, handled by its /swarm handler (a number it cannot read is checked here first, so
# that a refused POST changes nothing)
LOCUST_FIELDS = {"user_count", "spawn_rate", "host", "user_classes", "run_time", "profile", "shape_class"}
LOCUST_NUMBERS = {"user_count": int, "spawn_rate": float}


class FormError(ValueError):
    """A start form that cannot start a run: its one-line message."""


@dataclass(frozen=True)
class Field:
    """One of the suite's options in the start form."""

    action: argparse.Action
    kind: str  # features.FIELD or features.PATH

    @property
    def flag(self) -> str:
        if isinstance(self.action, argparse.BooleanOptionalAction):  # --x and --no-x: the checkbox is --x
            return self.action.option_strings[0]
        return max(self.action.option_strings, key=len)

    @property
    def dest(self) -> str:
        return self.action.dest

    @property
    def repeated(self) -> bool:
        return isinstance(self.action.default, list)  # action="append": one line per value

    def read(self, texts: list[str]) -> Any:
        """The option's value from the form's texts, as the command line reads it."""
        if isinstance(self.action, argparse.BooleanOptionalAction):  # checked: --x, unchecked: --no-x
            return texts[-1] == "true"
        if self.action.nargs == 0:  # a flag (store_true): the form says true or false
            return self.action.const if texts[-1] == "true" else self.action.default
        values = [self.convert(text) for text in texts]
        return values if self.repeated else values[-1]

    def convert(self, text: str) -> Any:
        action = self.action
        if text == "" and action.default is None:
            return None  # an option unset by default: the field left empty leaves it unset
        try:
            value = action.type(text) if callable(action.type) else text
        except (TypeError, ValueError):
            name = getattr(action.type, "__name__", "")
            raise FormError(f"argument {self.flag}: invalid {name} value: {text!r}") from None
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(repr(choice) for choice in action.choices)
            raise FormError(f"argument {self.flag}: invalid choice: {value!r} (choose from {choices})")
        return value


class StartForm:
    """The start form of the options registered on ``parser`` (a parser the suite's options and the locustfiles'
    were added to): its fields by group, and the check of a POST."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.groups = [
            (
                group.capability.title,
                [
                    Field(action, group.kinds[action.dest])
                    for action in group.actions
                    if group.kinds[action.dest] != features.COMMAND_LINE
                ],
            )
            for group in features.groups(parser)
        ]
        self.fields = {field.flag: field for _, fields in self.groups for field in fields}
        self.by_dest = {field.dest: field for field in self.fields.values()}
        # a locustfile's own option that Locust's form shows (LocustArgumentParser's include_in_web_ui)
        self.plain = LOCUST_FIELDS | set(getattr(parser, "args_included_in_web_ui", {}))

    def changes(self, form: MultiDict[str, str]) -> dict[str, Any]:
        """The suite's options the form sets (dest -> value); a FormError for a field it may not name or a value the
        command line would refuse."""
        values: dict[str, Any] = {}
        for key in dict.fromkeys(form.keys()):
            field = self.fields.get(key) or self.by_dest.get(key)
            if key in self.plain:
                if key in LOCUST_NUMBERS:
                    self.check_number(key, form[key])
                elif key == "run_time" and form[key]:
                    self.check_run_time(form[key])
            elif field is None:
                raise FormError(f"the start form has no field {key!r}: set it on the command line or in the scenario")
            elif field.kind == features.PATH:
                raise FormError(path_refusal(field, form.getlist(key)))
            elif key != field.flag:
                raise FormError(f"the start form posts {key!r} as {field.flag}")
            else:
                texts = form.getlist(key)
                if field.repeated:  # one value a line
                    texts = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
                values[field.dest] = field.read(texts)
        return values

    @staticmethod
    def check_number(key: str, text: str) -> None:
        try:
            LOCUST_NUMBERS[key](text)
        except ValueError:
            wanted = "an integer" if key == "user_count" else "a number"
            raise FormError(f"Invalid {key} value: {text!r} (must be {wanted})") from None

    @staticmethod
    def check_run_time(text: str) -> None:
        try:
            parse_timespan(text)
        except ValueError:
            raise FormError("Valid run_time formats are : 20, 20s, 3m, 2h, 1h20m, 3h30m10s, etc.") from None

    def check(self, environment: Environment, form: MultiDict[str, str]) -> dict[str, Any]:
        """The options a POST of ``form`` sets once every check passed; a FormError otherwise."""
        values = self.changes(form)
        current = environment.parsed_options
        if current is None:
            return values
        options = argparse.Namespace(**{**vars(current), **values})
        if form.get("host", environment.host) != environment.host and has_api_key(current):
            raise FormError(
                "with an API key the target is the command line's --host: a host set from the form would be sent the key"
            )
        if values.get("traffic_class", current.traffic_class) != current.traffic_class and any(
            c.dataset for c in classes_of(options)
        ):  # before validate, which reads a class's dataset (or downloads it: hf:ORG/NAME)
            raise FormError(
                "--traffic-class: dataset= names a file on the master or a dataset it would download: only its "
                "command line or the scenario sets a class's dataset"
            )
        try:
            validate(options)
            if check_options := getattr(environment.shape_class, "check_options", None):
                check_options(options)
        except (StopTarget, ValueError) as error:
            raise FormError(str(error)) from None
        return values


def path_refusal(field: Field, texts: list[str]) -> str:
    """Why a PATH option posted from the form is refused: it names a file on the master, or a Hub dataset the master
    would download (``--dataset hf:ORG/NAME``: client/hubdataset.py), whatever its value."""
    hub = next((text for text in texts if is_hub_id(text)), None)
    if hub and field.dest == "dataset":
        return f"{field.flag} {hub}: names a dataset the master would download: only its command line or the scenario sets it"
    return f"{field.flag} names a file on the master: only its command line or the scenario sets it"


def has_api_key(options: argparse.Namespace) -> bool:
    """The run sends a bearer token (--api-key-file, --api-key or OPENAI_API_KEY: client.options.api_key)."""
    return bool(options.api_key_file or options.api_key or os.environ.get("OPENAI_API_KEY", "").strip())


def classes_of(options: argparse.Namespace) -> list[TrafficClass]:
    """The declared traffic classes, none when malformed (validate says why)."""
    try:
        return declared(options)
    except ValueError:
        return []


def apply(environment: Environment, values: Mapping[str, Any]) -> None:
    """Set the checked options on the run's options (Locust sends them to the workers with the run's start)."""
    if environment.parsed_options is not None:
        vars(environment.parsed_options).update(values)
