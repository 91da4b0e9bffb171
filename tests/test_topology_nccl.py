"""Reading nccl-tests output and fitting alpha-beta to it (seed §2.4: B is calibrated from NCCL benchmarks)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.errors import SpecError
from seedance.models.topology import NCCL_COLUMNS, calibrate_from_nccl_tests, parse_nccl_tests

# Hand-written in the layout of recent nccl-tests (root column, "#wrong"), with NCCL log lines interleaved as MPI
# prints them. The numbers are invented but shaped like an 8-GPU NVSwitch allreduce: ~10.5 µs floor, a bump where
# NCCL changes protocol, busbw levelling near 230 GB/s (NCCL's own model caps sm80 busbw at 235 GB/s).
ALLREDUCE = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  40213 on    box-a device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  40214 on    box-a device  1 [0x0b] NVIDIA A100-SXM4-80GB
box-a:40213:40213 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>
box-a:40213:40213 [0] NCCL INFO NCCL version 2.18.3+cuda12.2
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    10.50    0.00    0.00       0    10.55    0.00    0.00       0
          64            16     float     sum      -1    10.51    0.01    0.01       0    10.71    0.01    0.01       0
        1024           256     float     sum      -1    10.50    0.10    0.17       0    10.62    0.10    0.17       0
       16384          4096     float     sum      -1    10.42    1.57    2.75       0    10.67    1.54    2.69       0
      262144         65536     float     sum      -1    15.24   17.20   30.09       0    15.49   16.92   29.62       0
     4194304       1048576     float     sum      -1    52.30   80.20  140.36       0    52.67   79.63  139.36       0
    67108864      16777216     float     sum      -1   524.48  127.95  223.92       0   518.73  129.37  226.40       0
   536870912     134217728     float     sum      -1  4073.47  131.80  230.64       0  4104.12  130.81  228.92       0
  1073741824     268435456     float     sum      -1  8104.32  132.49  231.86       0  8210.59  130.78  228.86       0
  4294967296    1073741824     float     sum      -1  33178.66  129.45  226.54       0  32148.69  133.60  233.79       0
  8589934592    2147483648     float     sum      -1  65143.10  131.86  230.76       0  64493.87  133.19  233.08       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 101.254
#
"""

# The older layout (no root column, "error" column in scientific notation) with in-place N/A, as alltoall prints.
ALLTOALL_OLD = """\
# nThread 1 nGpus 4 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        65536    float    none    40.11   26.14   19.61  0e+00      N/A     N/A     N/A    N/A
     2097152       131072    float    none    71.90   29.17   21.88  0e+00      N/A     N/A     N/A    N/A
     4194304       262144    float    none   135.32   31.00   23.25  0e+00      N/A     N/A     N/A    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 21.58
"""


def test_parse_new_layout():
    frame = parse_nccl_tests(ALLREDUCE)
    assert list(frame.columns) == list(NCCL_COLUMNS) and len(frame) == 11
    first, last = frame.iloc[0], frame.iloc[-1]
    head = (first["size_bytes"], first["count"], first["dtype"], first["redop"], first["root"])
    assert head == (8, 2, "float", "sum", -1)
    assert last.oop_time_us == 65143.10 and last.oop_busbw_GBps == 230.76 and last.ip_algbw_GBps == 133.19
    assert frame.attrs["avg_busbw_GBps"] == 101.254
    # nccl-tests' definitions hold in the fixture: algbw = S/t, busbw = algbw·2(n−1)/n with n = 8.
    big = frame[frame.size_bytes >= 2**20]
    np.testing.assert_allclose(big.size_bytes / big.oop_time_us / 1e3, big.oop_algbw_GBps, rtol=1e-3)
    np.testing.assert_allclose(big.oop_algbw_GBps * 2 * 7 / 8, big.oop_busbw_GBps, rtol=1e-3)


def test_parse_old_layout_with_not_available_columns():
    frame = parse_nccl_tests(ALLTOALL_OLD)
    assert len(frame) == 3 and (frame.root == -1).all() and (frame.redop == "none").all()
    assert frame.oop_wrong.tolist() == [0.0, 0.0, 0.0] and frame.ip_time_us.isna().all()
    assert frame.attrs["avg_busbw_GBps"] == 21.58


@pytest.mark.parametrize("text,field", [
    ("hello\nworld\n", "nccl-tests output"),
    ("", "nccl-tests output"),
    (ALLREDUCE.replace("   524.48  127.95", "   524.48"), "line 18"),
    (ALLREDUCE.replace("   524.48", "   fast"), "line 18"),
])
def test_malformed_output_is_a_spec_error(text, field):
    with pytest.raises(SpecError) as err:
        parse_nccl_tests(text)
    assert err.value.field == field


def test_calibration_recovers_alpha_and_bandwidth_exactly():
    # Closed form: ring allreduce on n devices, t = 2(n−1)·α + 2(n−1)/n · S/B.
    n, alpha, bandwidth = 8, 2.5e-6, 180.0
    sizes = 2 ** np.arange(3, 34)
    time_us = (2 * (n - 1) * alpha + 2 * (n - 1) / n * sizes / (bandwidth * 1e9)) * 1e6
    rows = pd.DataFrame({"size_bytes": sizes, "oop_time_us": time_us, "ip_time_us": time_us})
    fit_alpha, fit_bandwidth = calibrate_from_nccl_tests(rows, "allreduce", n)
    assert fit_alpha == pytest.approx(alpha, rel=1e-9) and fit_bandwidth == pytest.approx(bandwidth, rel=1e-9)
    fit_alpha, fit_bandwidth = calibrate_from_nccl_tests(rows.to_dict("records"), "allgather", n, placement="ip")
    # The same times read as an allgather: (n−1) steps and factor (n−1)/n, so α doubles and B halves.
    assert fit_alpha == pytest.approx(2 * alpha, rel=1e-9) and fit_bandwidth == pytest.approx(bandwidth / 2, rel=1e-9)


def test_calibration_of_the_fixture():
    alpha, bandwidth = calibrate_from_nccl_tests(parse_nccl_tests(ALLREDUCE), "allreduce", 8, min_size_bytes=2**26)
    # The large sizes level at busbw ≈ 230 GB/s; the fit must land there.
    assert 220 < bandwidth < 240 and alpha >= 0
    alpha_all, _ = calibrate_from_nccl_tests(parse_nccl_tests(ALLREDUCE), "allreduce", 8)
    assert 0.5e-6 < alpha_all < 1.0e-6  # 10.5 µs floor over 2·7 steps = 0.75 µs per step


@pytest.mark.parametrize("kwargs,field", [
    ({"collective": "allscatter"}, "collective"),
    ({"num_devices": 1}, "num_devices"),
    ({"num_devices": True}, "num_devices"),
    ({"placement": "both"}, "placement"),
    ({"min_size_bytes": 2**40}, "rows"),
])
def test_calibration_errors(kwargs, field):
    args = {"collective": "allreduce", "num_devices": 8} | kwargs
    with pytest.raises(SpecError) as err:
        calibrate_from_nccl_tests(parse_nccl_tests(ALLREDUCE), **args)
    assert err.value.field == field


token = st.sampled_from(["8", "-1", "float", "sum", "N/A", "0e+00", "12.5", "x", "#", "1e3", "nan", "", "0"])


@settings(max_examples=80, deadline=None)
@given(lines=st.lists(st.lists(token, max_size=14).map("  ".join), max_size=6), with_header=st.booleans())
def test_arbitrary_text_gives_a_table_or_a_spec_error(lines, with_header):
    header = ALLREDUCE.splitlines()[9:11] if with_header else []
    try:
        frame = parse_nccl_tests("\n".join(header + lines))
    except SpecError:
        return
    assert list(frame.columns) == list(NCCL_COLUMNS) and len(frame) >= 1
