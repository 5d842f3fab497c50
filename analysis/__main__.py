"""``python -m analysis`` from the repository root: the same as ``python -m vllm_stress.analysis``."""

import sys

from vllm_stress.analysis.cli import main

sys.exit(main())
