"""Simulator fidelity: the wire shapes of the simulator against those of a real vLLM.

A *shape* is what a client can depend on without reading the generated text: the SSE chunk sequence of a
stream (key sets, role/content/final/usage chunks, ``[DONE]``), the key sets of non-streamed answers, of
``/tokenize`` and ``/v1/models``, the error bodies, and the metric families of ``/metrics`` (name, type, labels).
``tests/fixtures/vllm_shapes.json`` holds the shapes of vLLM 0.32.0 (CPU build, started by deploy/real-vllm.sh: with
``--enable-prompt-tokens-details``, so streamed usage has ``prompt_tokens_details``); the realvllm tier checks it
against the live server and rewrites it with ``VLLM_SHAPES_UPDATE=1``::

    VLLM_SHAPES_UPDATE=1 .venv/bin/python -m pytest tests/test_realvllm.py -m realvllm -k fixture

Differences found and decided are in ``benchmarks/fidelity.md``.
"""

import json

import pytest

from tests.shapes import AS_REAL_VLLM, FIXTURE, differences, dump_shapes, simulator_differences


@pytest.mark.product_free
def test_differences_name_what_changed():
    vllm = {"chunks": [{"keys": ["a", "b"], "object": "x"}, "[DONE]"], "metrics": {"m": {"type": "gauge"}}}
    ours = {"chunks": [{"keys": ["a", "c"], "object": "y"}, "[DONE]"], "metrics": {}}
    assert differences(vllm, ours) == [
        "/chunks[0]/keys: missing ['b'], extra ['c']",
        '/chunks[0]/object: "y", vLLM "x"',
        '/metrics/m: missing (vLLM: {"type": "gauge"})',
    ]
    assert differences(vllm, vllm) == []
    assert json.loads(dump_shapes(vllm)) == vllm


def test_simulator_matches_the_captured_vllm_shapes(simulator):
    sim = simulator(*AS_REAL_VLLM)
    found = simulator_differences(json.loads(FIXTURE.read_text()), sim.url, sim.model)
    assert not found, "\n".join(found)
