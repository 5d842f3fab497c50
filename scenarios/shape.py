"""Locustfile: the step ramp (``vllm_stress.scenarios.shapes.shape``), added after a user locustfile.

locust -f locustfiles/chat.py,scenarios/shape.py --levels 10,50,100 --step-time auto
"""

from vllm_stress.scenarios.shapes.shape import StepRampShape

__all__ = ["StepRampShape"]
