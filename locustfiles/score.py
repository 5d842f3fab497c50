"""Locustfile: vLLM's score API (``/score``) (``vllm_stress.users.score``).

locust -f locustfiles/score.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.score import ScoreUser

__all__ = ["ScoreUser"]
