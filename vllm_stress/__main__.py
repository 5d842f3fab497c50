"""``python -m vllm_stress``: the ``vllm-stress`` command."""

import sys

from vllm_stress.cli import main

sys.exit(main())
