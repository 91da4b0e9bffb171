"""The seed's point-to-point formula (SEED §2.4), exactly, and its input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seedance.errors import SpecError
from seedance.models.cost import comm_cost

B = [[0.0, 300.0, 25.0], [300.0, 0.0, 25.0], [12.5, 25.0, 0.0]]


def test_seed_formula_on_the_seed_example():
    # §2.4: comm_cost(grad_shape, src, dst, B) = grad_shape[0] * grad_shape[1] * 4 / (B[src][dst] * 1e9)
    grad_shape = (4096, 4096)
    for src, dst in [(0, 1), (0, 2), (2, 0), (1, 2)]:
        expected = grad_shape[0] * grad_shape[1] * 4 / (B[src][dst] * 1e9)
        assert comm_cost(grad_shape, src, dst, B) == expected
    assert comm_cost(grad_shape, 0, 1, B) == pytest.approx(0.2236962133e-3, rel=1e-9)  # 64 MiB at 300 GB/s


def test_dtype_latency_and_any_rank():
    assert comm_cost((10,), 0, 1, B, dtype_bytes=2) == 20 / 300e9
    assert comm_cost((2, 3, 4), 0, 1, B, latency_s=1e-6) == 1e-6 + 24 * 4 / 300e9
    assert comm_cost((8, 8), 2, 0, np.array(B)) == 256 / 12.5e9  # asymmetric: B[2][0] != B[0][2]


@pytest.mark.parametrize(
    "args, kwargs, field",
    [
        (((0, 4), 0, 1, B), {}, "grad_shape"),
        (((), 0, 1, B), {}, "grad_shape"),
        (((4.5,), 0, 1, B), {}, "grad_shape"),
        (((4,), 3, 1, B), {}, "src"),
        (((4,), 0, -1, B), {}, "dst"),
        (((4,), 1, 1, B), {}, "dst"),
        (((4,), 0, 1, [[0, 1, 2]]), {}, "bandwidth_matrix"),
        (((4,), 0, 1, [[0, 0], [1, 0]]), {}, "bandwidth_matrix"),
        (((4,), 0, 1, B), {"dtype_bytes": 0}, "dtype_bytes"),
        (((4,), 0, 1, B), {"latency_s": math.nan}, "latency_s"),
    ],
)
def test_bad_input_is_a_spec_error_naming_the_field(args, kwargs, field):
    with pytest.raises(SpecError) as err:
        comm_cost(*args, **kwargs)
    assert err.value.field == field
