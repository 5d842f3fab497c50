"""The suite's options, one module per capability of ``vllm_stress.core.capabilities`` (named after its entry), each
registering its options in an argparse group titled as the registry says; ``add_arguments`` reads them in the
registry's order, so ``--help`` and the web UI's start form list them that way.

A module's ``add_arguments(group)`` gets an ``OptionGroup``: its ``add_argument`` takes argparse's keywords and
``form``, what the web UI's start form does with the option (``FIELD``, ``PATH`` or ``COMMAND_LINE``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import weakref
from dataclasses import dataclass, field
from typing import Any

from vllm_stress.core.capabilities import CAPABILITIES, Capability, capability

FIELD = "field"  # a field of the start form
PATH = "path"  # names a file or folder on the master: shown read-only, only the command line or the scenario sets it
COMMAND_LINE = "command line"  # set on the command line only, not shown: a secret, a port, what the runner passes
FORM_KINDS = (FIELD, PATH, COMMAND_LINE)


@dataclass
class OptionGroup:
    """One capability's options on a parser: its argparse group (``--help`` prints it under the title) and, for the
    start form, each option's action and form kind in the order they were added."""

    capability: Capability
    group: Any  # the parser's argparse argument group
    actions: list[argparse.Action] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # dest -> form kind

    def add_argument(self, *flags: str, form: str = FIELD, **kwargs: Any) -> argparse.Action:
        """argparse's add_argument, plus the option's form kind. Locust's own keywords (include_in_web_ui,
        is_secret) are taken by its parser's add_argument only, not a group's: none is needed, as Locust's form
        lists none of a group's options and the suite's start form shows them by group (vllm_stress.webui.startform);
        configargparse's ``env_var`` works here as everywhere."""
        if form not in FORM_KINDS:
            raise ValueError(f"{flags[0]}: form must be one of {FORM_KINDS}, got {form!r}")
        action: argparse.Action = self.group.add_argument(*flags, **kwargs)
        self.actions.append(action)
        self.kinds[action.dest] = form
        return action


_GROUPS: weakref.WeakKeyDictionary[argparse.ArgumentParser, dict[str, OptionGroup]] = weakref.WeakKeyDictionary()


def option_group(parser: argparse.ArgumentParser, name: str) -> OptionGroup:
    """The group of capability ``name`` on ``parser``, made on first use (titled, its doc page as its description);
    a layer above the client (the step ramp's shape) adds its options to the same group."""
    groups = _GROUPS.setdefault(parser, {})
    if name not in groups:
        entry = capability(name)
        groups[name] = OptionGroup(entry, parser.add_argument_group(entry.title, f"docs/{entry.doc}"))
    return groups[name]


def groups(parser: argparse.ArgumentParser) -> list[OptionGroup]:
    """The capability groups on ``parser``, in the registry's order."""
    made = _GROUPS.get(parser, {})
    return [made[entry.name] for entry in CAPABILITIES if entry.name in made]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register every capability's options on ``parser``, in the registry's order (a capability without a module
    here has no options of the load generator)."""
    for entry in CAPABILITIES:
        if importlib.util.find_spec(f"{__name__}.{entry.name}") is not None:
            module = importlib.import_module(f"{__name__}.{entry.name}")
            module.add_arguments(option_group(parser, entry.name))
