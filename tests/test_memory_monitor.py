"""The memory monitor (seedance.monitor.memory): verdicts on synthetic series, a real growing process, the table."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from seedance.monitor import memory


def _series(slope: float, noise: float, n: int = 300, seed: int = 0, base: float = 200e6) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    return t.tolist(), (base + slope * t + rng.normal(0.0, noise, n)).tolist()


def test_flat_noisy_series_is_no_leak() -> None:
    for seed in range(5):
        t, y = _series(0.0, 200e3, seed=seed)
        verdict = memory.leak_verdict(t, y)
        assert not verdict["leak"]
        assert abs(verdict["drift_pct"]) < 1.0


def test_growth_beyond_the_threshold_is_a_leak_and_small_growth_is_not() -> None:
    t, y = _series(50e3, 200e3)  # 50 kB/s over 300 s: 15 MB on 200 MB, 7.5 %
    verdict = memory.leak_verdict(t, y)
    assert verdict["leak"] and verdict["significant"]
    assert verdict["ci"][0] < 50e3 < verdict["ci"][1]
    assert verdict["drift_pct"] == pytest.approx(7.5, rel=0.1)
    t, y = _series(2e3, 10e3)  # significant, but 0.3 % over the run: below the 1 % threshold
    small = memory.leak_verdict(t, y)
    assert small["significant"] and not small["leak"]
    assert memory.leak_verdict(t, y, drift_threshold_pct=0.1)["leak"]


def test_the_last_third_tells_settling_from_a_leak_without_changing_the_verdict() -> None:
    """Memory that settles after start-up (an exponential approach to a plateau, like a soak's RSS after the
    allocator's arenas fill) has most of its slope early; a leak keeps its slope to the end."""
    rng = np.random.default_rng(1)
    t = np.arange(540, dtype=float)
    settling = 230e6 + 400e3 * (1 - np.exp(-t / 120.0)) + rng.normal(0, 4e3, t.size)
    verdict = memory.leak_verdict(t.tolist(), settling.tolist())
    late = verdict["last_third"]
    assert verdict["significant"] and not verdict["leak"]  # 0.17 % drift: below the threshold, as before
    assert late["from_s"] == pytest.approx(359.33, abs=0.01) and late["slope"] < 0.2 * verdict["slope"]
    leak = 230e6 + 1.5e3 * t + rng.normal(0, 4e3, t.size)
    growing = memory.leak_verdict(t.tolist(), leak.tolist())
    assert growing["last_third"]["significant"]
    assert growing["last_third"]["slope"] == pytest.approx(growing["slope"], rel=0.1)
    assert memory.leak_verdict([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])["last_third"] is None  # too few samples


def _samples(t: list, y: list, key: str = "heap") -> list[dict]:
    return [{"t": a, key: b} for a, b in zip(t, y)]


def test_a_window_too_short_after_the_warm_up_gets_no_verdict() -> None:
    """The CI failure this guards: an 8 s run left a 3-4 s window after the warm-up, in which a warming rank's heap
    rose 1.4 % with a slope whose interval excluded 0 — a "leak" that was start-up. Such a window is not judged;
    the same growth over a window long enough is."""
    wobble = [0.0, 20e3, -15e3, 10e3, -20e3, 5e3, 15e3, -10e3] * 8
    t = [float(i) for i in range(8)]
    y = [90e6 + 430e3 * a + w for a, w in zip(t, wobble)]  # 0.43 MB/s on 90 MB: 1.4 % over 4 s after the warm-up
    short = memory.analyze_segment(_samples(t, y))
    assert short["heap"]["fit"]["significant"] and short["heap"]["fit"]["drift_pct"] > 1.0
    assert short["leaks"] == [] and short["not_judged"] == ["heap"] and not short["heap"]["fit"]["judged"]
    run = memory.analyze_run({0: [_samples(t, y)]})
    assert run["causes"] == [] and run["not_judged"] == ["rank 0: heap"]
    t = [float(i) for i in range(60)]
    y = [90e6 + 430e3 * a + w for a, w in zip(t, wobble)]  # the same growth for a minute: a 30 s window after the 30 s warm-up
    long = memory.analyze_segment(_samples(t, y))
    assert long["leaks"] == ["heap"] and long["not_judged"] == [] and long["heap"]["fit"]["judged"]


def test_a_series_sampled_too_few_times_for_a_fit_is_listed_as_not_judged() -> None:
    """The CI failure this guards: on a slow machine one rank of an 8 s run started late and left two samples; its
    rss had neither a verdict nor a place in ``not_judged`` — silently dropped, and the report named only the
    other rank as not judged."""
    few = [{"t": 0.0, "rss": 80e6, "fds": 12}, {"t": 1.0, "rss": 81e6, "fds": 12}]
    seg = memory.analyze_segment(few)
    assert seg["not_judged"] == ["rss"] and seg["leaks"] == [] and "rss" not in seg
    run = memory.analyze_run({0: [few], 1: [_samples([float(i) for i in range(8)], [90e6] * 8)]})
    assert run["not_judged"] == ["rank 0: rss", "rank 1: heap"] and run["causes"] == []


def test_constant_series_has_no_slope_and_no_leak() -> None:
    verdict = memory.leak_verdict(list(range(10)), [5.0] * 10)
    assert verdict["slope"] == 0.0 and not verdict["significant"] and not verdict["leak"]


def test_fluctuation_and_period_table() -> None:
    assert memory.fluctuation_pct([99.0, 100.0, 101.0]) == pytest.approx(1.0)
    t = list(range(9))
    y = [100.0, 100.0, 100.0, 99.0, 101.0, 100.0, 98.0, 102.0, 100.0]
    rows = memory.period_table(t, y, periods=3)
    assert [r["n"] for r in rows] == [3, 3, 3]
    assert [r["fluctuation_pct"] for r in rows] == pytest.approx([0.0, 1.0, 2.0])
    assert rows[1]["mean"] == pytest.approx(100.0) and rows[1]["std"] == pytest.approx(1.0)


def test_counts_floor_and_transients() -> None:
    t = list(range(60))
    growing = [6 + i // 2 for i in t]  # one handle every two samples (a commit leaking its event)
    verdict = memory.count_verdict(t, growing)
    assert verdict["leak"] and verdict["growth"] == 25  # floors of the first and last 10 samples: 6 and 31
    spiky = [20 + (3 if i % 7 == 0 else 0) for i in t]  # transient opens (a checkpoint being written)
    assert not memory.count_verdict(t, spiky)["leak"]


_CHILD = textwrap.dedent("""
    import sys, time
    grow = sys.argv[1] == "grow"
    keep = [bytearray(8 << 20)]  # touched once: resident from the start
    for i in range(len(keep[0]) // 4096):
        keep[0][i * 4096] = 1
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        if grow:
            block = bytearray(256 << 10)
            for i in range(0, len(block), 4096):
                block[i] = 1  # touch every page: resident
            keep.append(block)
        time.sleep(0.02)
    print("done", flush=True)
    sys.stdin.readline()  # stay alive, memory held, until the parent has stopped sampling
""")


def _sample_child(mode: str, seconds: float) -> list[dict]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, mode, str(seconds)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        sampler = memory.Sampler(pid=child.pid, interval_s=0.05)
        sampler.start()
        assert child.stdout.readline().strip() == "done"
        sampler.stop()  # before the child exits (its RSS falls while it frees its memory)
        child.stdin.close()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return sampler.samples


def test_a_real_allocation_loop_is_detected_and_a_steady_process_is_not() -> None:
    grown = memory.analyze_segment(_sample_child("grow", 1.5), warmup_min_s=0.1, min_window_s=0.5)
    assert "rss" in grown["leaks"], grown["rss"]["fit"]
    assert grown["rss"]["fit"]["slope"] > 1e6  # ~12 MB/s of touched pages
    steady = memory.analyze_segment(_sample_child("flat", 1.5), warmup_min_s=0.1, min_window_s=0.5)
    assert steady["leaks"] == [], steady.get("rss", {}).get("fit")
    assert steady["threads"]["growth"] <= 0 and steady["fds"]["growth"] <= 0


def test_sampler_writes_json_lines_and_no_cuda_without_torch_cuda(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    sampler = memory.Sampler(interval_s=0.02, path=path, handles=lambda: 7, extra={"rank": 3})
    sampler.start()
    time.sleep(0.15)
    sampler.stop()
    rows = [__import__("json").loads(line) for line in path.read_text().splitlines()]
    assert len(rows) >= 3
    assert all(r["rank"] == 3 and r["handles"] == 7 and r["rss"] > 0 and r["threads"] >= 2 for r in rows)
    assert memory.cuda_allocated("cpu") is None
    cuda = memory.cuda_allocated("cuda:0")
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        assert cuda is None  # never initialises CUDA itself
    else:  # pragma: no cover - needs a GPU
        assert cuda == torch.cuda.memory_allocated("cuda:0")


def test_heap_counts_live_allocations_while_rss_keeps_what_the_allocator_retains() -> None:
    """``heap`` (glibc ``mallinfo2``) beside RSS: 8,000 touched 4 KiB blocks raise both; freeing every other block
    lowers ``heap`` by half of them while RSS keeps the holes (glibc returns no page inside its heap on ``free``):
    the soak's way to tell memory retained (fragmentation) from live allocations growing."""
    import ctypes
    import os

    import psutil

    if memory.malloc_in_use() is None:
        pytest.skip("glibc >= 2.33 only (mallinfo2)")
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    me = psutil.Process(os.getpid())
    before = memory.sample(me, t0=0.0)
    blocks = [libc.malloc(4096) for _ in range(8000)]
    try:
        for block in blocks:
            ctypes.memset(block, 1, 4096)
        full = memory.sample(me, t0=0.0)
        for block in blocks[::2]:
            libc.free(block)
        holes = memory.sample(me, t0=0.0)
    finally:
        for block in blocks[1::2]:
            libc.free(block)
    assert full["heap"] - before["heap"] >= 8000 * 4096
    assert full["heap"] - holes["heap"] >= 4000 * 4096  # half of them freed: gone from the live figure
    assert full["rss"] - holes["rss"] < 1000 * 4096  # ... but still resident
    assert memory.sample(psutil.Process(os.getppid()), t0=0.0)["heap"] is None  # another process: not ours to ask
