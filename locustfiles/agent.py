"""Locustfile: agent tasks, one at a time per user: model turns, tool calls run by the client, fan-outs
(``vllm_stress.users.agent``).

locust -f locustfiles/agent.py -H http://127.0.0.1:8000 --headless -u 4 -t 1m --agent-task task.json"""

from vllm_stress.users.agent import AgentUser

__all__ = ["AgentUser"]
