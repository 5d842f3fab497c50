"""``python -m simulator`` from the repository root: the same as ``python -m vllm_stress.simulator``."""

import sys

from vllm_stress.simulator.cli import main

sys.exit(main())
