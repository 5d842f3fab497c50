"""``python -m vllm_stress.analysis``."""

import sys

from vllm_stress.analysis.cli import main

sys.exit(main())
