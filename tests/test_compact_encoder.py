"""seedance.jsonable.compact_encoder: the same text as json.dumps with compact separators, faster."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.jsonable import compact_encoder

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_the_text_is_json_dumps_text(value):
    assert compact_encoder()(value) == json.dumps(value, separators=(",", ":"), allow_nan=False)


def test_what_json_dumps_refuses_it_refuses_and_default_is_used():
    encode = compact_encoder()
    for bad in (math.nan, {"x": [math.inf]}, -math.inf):
        with pytest.raises(ValueError, match="not JSON compliant"):
            encode(bad)
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode({"x": object()})
    with_default = compact_encoder(lambda obj: sorted(obj) if isinstance(obj, set) else str(obj))
    assert with_default({"s": {3, 1}, "n": np.float64(0.25)}) == '{"s":[1,3],"n":0.25}'
    assert encode("é\n") == json.dumps("é\n")  # a bare string, ASCII-escaped like json.dumps
