"""``python -m vllm_stress.scenarios``."""

import sys

from vllm_stress.scenarios.cli import main

sys.exit(main())
