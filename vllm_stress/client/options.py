"""The suite's command-line options on Locust's parser (each capability's in its own group:
``vllm_stress.client.features``), and the API key they give."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from vllm_stress.client import features

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser


def add_arguments(parser: LocustArgumentParser) -> None:
    """Register the suite's options on Locust's argument parser, a group per capability."""
    features.add_arguments(parser)


def api_key(options: argparse.Namespace) -> str:
    """The bearer token from --api-key-file, --api-key or OPENAI_API_KEY (in that order), or ''. Surrounding
    whitespace is dropped: a file or a Kubernetes Secret made with --from-file usually ends in a newline."""
    if options.api_key_file:
        with open(options.api_key_file, encoding="utf-8") as f:
            return f.read().strip()
    return (options.api_key or os.environ.get("OPENAI_API_KEY", "")).strip()
