"""``python -m simulator`` from the repository root: the same as ``python -m vllm_stress.simulator``;
``python -m simulator calibrate ...`` fits a twin's profile to measured runs (vllm_stress/scenarios/studies/calibrate.py)."""

import sys

if sys.argv[1:2] == ["calibrate"]:
    from vllm_stress.scenarios.studies.calibrate import main as calibrate_main

    sys.exit(calibrate_main(sys.argv[2:]))

from vllm_stress.simulator.cli import main

sys.exit(main())
