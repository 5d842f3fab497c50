"""Locust's web UI, extended: the LLM tab, the live dashboard, the start form's checks."""
