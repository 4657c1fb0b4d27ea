"""The helpers that issue 42's clean-up folded copies into: each one does what every copy it
replaced did (the store's JSON columns, `--json` output, the two loaders' shared methods)."""

from __future__ import annotations

import json
import math

from dlperf.parsing import finite_json


def test_finite_json_writes_non_finite_floats_as_null_at_any_depth() -> None:
    value = {"a": math.nan, "b": [1.0, math.inf, (-math.inf, 2)], "c": {"d": {"e": math.nan}}}
    assert finite_json(value) == {"a": None, "b": [1.0, None, [None, 2]], "c": {"d": {"e": None}}}


def test_finite_json_keeps_finite_values_and_names_keys_as_json_does() -> None:
    value = {1: 0.5, "s": "nan", "n": None, "t": True, "i": 3}
    out = finite_json(value)
    assert out == {"1": 0.5, "s": "nan", "n": None, "t": True, "i": 3}
    # Strict JSON: no NaN or Infinity token left for a reader (or PostgreSQL) to refuse.
    json.dumps(out, allow_nan=False)
