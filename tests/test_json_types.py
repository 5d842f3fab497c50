"""vllm_stress.analysis.io.json_types: analysis results as plain JSON values."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from vllm_stress.analysis.io.json_types import to_json_types


def test_numpy_scalars_become_python_ones():
    converted = to_json_types({"users": np.int64(8), "tok_s": np.float64(1.5), "steady": np.bool_(True)})
    assert converted == {"users": 8, "tok_s": 1.5, "steady": True}
    assert [type(value) for value in converted.values()] == [int, float, bool]


@pytest.mark.parametrize("missing", [math.nan, np.float64("nan"), math.inf, -math.inf])
def test_nan_and_infinities_become_null(missing):
    assert to_json_types({"p99": missing, "runs": [missing, 1.0]}) == {"p99": None, "runs": [None, 1.0]}


def test_nested_containers_keys_as_text_and_tuples_as_lists():
    record = pd.DataFrame({"users": [4], "unstable": [["e2e_p99_s"]]}).to_dict("records")[0]
    converted = to_json_types({1: (record, "x"), "none": None})
    assert converted == {"1": [{"users": 4, "unstable": ["e2e_p99_s"]}, "x"], "none": None}
    assert json.loads(json.dumps(converted, allow_nan=False)) == converted


def test_anything_json_cannot_hold_is_refused():
    with pytest.raises(TypeError, match="not a JSON value"):
        to_json_types({"when": pd.Timestamp(0)})
