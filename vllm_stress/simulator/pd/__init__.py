"""Disaggregated prefill/decode (``--pd PxD``): P prefill and D decode instances of the api room, the modelled KV link
between them, and the proxy in front (docs/guides/disaggregated.md)."""
