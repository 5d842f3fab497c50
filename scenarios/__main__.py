"""``python -m scenarios`` from the repository root: the same as ``python -m vllm_stress.scenarios``."""

import sys

from vllm_stress.scenarios.cli import main

sys.exit(main())
