"""vllm-stress: Locust-based stress tests for vLLM servers. Subpackages by role, lowest first: ``core``;
``client``, ``master``, ``webui``, ``users`` (the Locust side); ``simulator``; ``analysis``; ``scenarios``; and ``cli``,
the command-line front end."""
