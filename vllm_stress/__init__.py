"""The neutral core of vllm-stress: metric definitions and rules that the load generator (``locustfiles``,
``scenarios``) and the analysis share. It imports neither Locust nor pandas, so every side can use it."""
