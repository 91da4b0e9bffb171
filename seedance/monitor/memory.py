"""Memory and resource monitor: samples, the seed's per-period table, and a leak verdict with a confidence interval.

Sampling (:class:`Sampler`, a daemon thread, every ``interval_s``, 1 s by default) records for one process:

* ``rss``: resident set size (psutil), bytes;
* ``cuda``: ``torch.cuda.memory_allocated(device)`` (tensors the caching allocator handed out, not what it reserved)
  when the process already uses CUDA (``torch.cuda.is_available()`` and initialised); ``None`` otherwise;
* ``heap``: bytes the C allocator has handed out and not taken back (glibc's ``mallinfo2``: ``uordblks + hblkhd``)
  when the sampler samples its own process on glibc ≥ 2.33; ``None`` otherwise. RSS also holds what the allocator
  keeps after frees (fragmentation, its trim threshold): an RSS slope with a flat ``heap`` is memory retained, not
  live allocations growing. Python's small objects live in pymalloc's own arenas, outside this figure;
* ``fds`` (open file descriptors), ``threads`` (OS threads), and ``handles``: live device-buffer handles of the
  process's effect engine when a counter is given (the real node passes its engine's ``buffers.live``).

A real node samples itself when ``SEEDANCE_MEMCHECK_S`` is set (:func:`start_node_sampler`), into
``node-<rank>/memory-<incarnation>.jsonl`` beside its state; times are seconds since the run's start.

Analysis, per series (after a warm-up, the first ``warmup_fraction`` of the series, at least ``warmup_min_s`` — a
fresh rank's RSS climbs for about half a minute and it starts its collectives' threads at its first commit — and
never more than half of it):

* :func:`period_table`: the run cut into equal periods (the seed's table: three periods of a 72-hour run), each
  with mean, standard deviation, and fluctuation ``±100·(max−min)/(2·mean)`` % (half the range around the mean;
  ``cv_pct`` = 100·std/mean is reported beside it).
* :func:`fit`: ordinary least squares of value on time (``scipy.stats.linregress``), the slope's two-sided
  confidence interval from Student's t with n−2 degrees of freedom, and the drift the slope implies over the
  series, in % of its mean. A leak (:func:`leak_verdict`) needs both: the interval excludes 0 (the growth is not
  noise) and the drift exceeds ``drift_threshold_pct`` (it matters). A flat or noisy series is never a leak.
* A memory series is judged only when its window after the warm-up spans at least ``min_window_s`` (20 s) and
  ``MIN_WINDOW_SAMPLES`` samples; a shorter one gets ``judged: False`` and no verdict (it is listed in
  ``not_judged``, and reports say so; so is a series sampled too few times for a fit at all). In a run of a few
  seconds the whole series is start-up: an 8 s run left a 3 s window in which a rank's heap rose 1.4 % (424 KiB/s,
  interval excluding 0) while it warmed up — a "leak" that was only start-up.
* :func:`count_verdict` for counts (handles, fds, threads): the floor (minimum) of the first and of the last
  window; a leak is a floor that rose (transient opens do not move a floor) with a significant positive slope.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

MEMCHECK_ENV = "SEEDANCE_MEMCHECK_S"  # sampling interval of a real node (unset: no sampling)
WARMUP_FRACTION, WARMUP_MIN_S = 0.1, 30.0  # the warm-up left out of every verdict (see the module docstring)
# the least a memory series' window after its warm-up must hold for a leak verdict (see the module docstring)
MIN_WINDOW_S, MIN_WINDOW_SAMPLES = 20.0, 10
SERIES = ("rss", "cuda", "heap")
COUNTS = ("handles", "fds", "threads")


# ---------------------------------------------------------------------------------------------------- sampling
def cuda_allocated(device: str | None) -> int | None:
    """``torch.cuda.memory_allocated`` of ``device`` when this process already uses CUDA, else None (never imports
    torch, never initialises CUDA)."""
    torch = sys.modules.get("torch")
    if torch is None or not device or not str(device).startswith("cuda"):
        return None
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.memory_allocated(device))
    except Exception:  # noqa: BLE001 - a monitor never takes its process down
        return None


_MALLINFO2: Any = None  # the C function once looked up; False: not this C library


def malloc_in_use() -> int | None:
    """This process's bytes in use in glibc's allocator (``mallinfo2``: arenas + its own mmaps); None elsewhere."""
    global _MALLINFO2
    if _MALLINFO2 is None:
        import ctypes

        class MallInfo2(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                             "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

        try:
            _MALLINFO2 = ctypes.CDLL(None).mallinfo2
            _MALLINFO2.restype = MallInfo2
            _MALLINFO2.argtypes = []
        except (OSError, AttributeError):  # not glibc, or glibc < 2.33
            _MALLINFO2 = False
    if not _MALLINFO2:
        return None
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)


def sample(process: Any, *, t0: float, device: str | None = None,
           handles: Callable[[], int | None] | None = None) -> dict[str, Any]:
    """One sample of ``process`` (a ``psutil.Process``)."""
    with process.oneshot():
        rss = process.memory_info().rss
        fds = process.num_fds() if hasattr(process, "num_fds") else None
        threads = process.num_threads()
    count = None
    if handles is not None:
        try:
            count = handles()
        except Exception:  # noqa: BLE001
            count = None
    return {"t": time.monotonic() - t0, "rss": int(rss), "cuda": cuda_allocated(device),
            "heap": malloc_in_use() if process.pid == os.getpid() else None, "fds": fds,
            "threads": int(threads), "handles": count}


class Sampler(threading.Thread):
    """Samples one process every ``interval_s`` into ``path`` (JSON lines, flushed per sample) and ``samples``
    (the latest ``keep`` of them; 0: none kept in memory, as a long-running node must). ``stop()`` ends it."""

    def __init__(self, *, pid: int | None = None, interval_s: float = 1.0, path: Path | None = None,
                 t0: float | None = None, device: str | Callable[[], str] | None = None,
                 handles: Callable[[], int | None] | None = None, extra: Mapping[str, Any] | None = None,
                 keep: int = 100_000) -> None:
        super().__init__(daemon=True, name="seedance-memcheck")
        import psutil

        self.process = psutil.Process(pid if pid is not None else os.getpid())
        self.interval_s = interval_s
        self.path = path
        self.t0 = time.monotonic() if t0 is None else t0
        self._device = device
        self.handles = handles
        self.extra = dict(extra or {})
        self.keep = keep
        self.samples: list[dict[str, Any]] = []
        self._stop_event = threading.Event()

    def _device_now(self) -> str | None:
        return self._device() if callable(self._device) else self._device

    def run(self) -> None:
        fh = open(self.path, "a", encoding="utf-8") if self.path is not None else None  # noqa: SIM115
        try:
            while True:
                try:
                    record = {**sample(self.process, t0=self.t0, device=self._device_now(), handles=self.handles),
                              **self.extra}
                except Exception:  # noqa: BLE001 - the process is gone, or /proc is unreadable for a moment
                    record = None
                if record is not None:
                    if self.keep:
                        self.samples.append(record)
                        if len(self.samples) > self.keep:
                            del self.samples[: len(self.samples) - self.keep]
                    if fh is not None:
                        fh.write(json.dumps(record) + "\n")
                        fh.flush()
                if self._stop_event.wait(self.interval_s):
                    return
        finally:
            if fh is not None:
                fh.close()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout_s)


def start_node_sampler(runtime: Any) -> Sampler | None:
    """In a real node process: sample it when ``SEEDANCE_MEMCHECK_S`` is set (see the module docstring)."""
    text = os.environ.get(MEMCHECK_ENV)
    if not text:
        return None
    interval = float(text)
    cfg = runtime.cfg
    path = Path(cfg.state_dir).parent / f"memory-{cfg.incarnation}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)

    def handles() -> int | None:
        engine = runtime.engine
        return int(engine.buffers.live) if engine is not None else None

    def device() -> str | None:  # never the sampler's import of torch (seconds, while the node starts)
        try:
            return runtime.device if "torch" in sys.modules else None
        except Exception:  # noqa: BLE001 - torch half-imported by the node's own thread
            return None

    sampler = Sampler(interval_s=interval, path=path, t0=cfg.t0_monotonic or None, device=device, handles=handles,
                      extra={"rank": cfg.node_id, "incarnation": cfg.incarnation}, keep=0)
    sampler.start()
    return sampler


def load_run(run_dir: Path, world: int) -> dict[int, list[list[dict[str, Any]]]]:
    """Every rank's samples, one list per incarnation (in order); a torn last line is skipped."""
    out: dict[int, list[list[dict[str, Any]]]] = {}
    for rank in range(world):
        segments = []
        paths = sorted((Path(run_dir) / f"node-{rank}").glob("memory-*.jsonl"),
                       key=lambda p: int(p.stem.split("-")[1]))
        for path in paths:
            rows = []
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
            if rows:
                segments.append(rows)
        out[rank] = segments
    return out


# ---------------------------------------------------------------------------------------------------- analysis
def fluctuation_pct(values: Sequence[float]) -> float:
    """±100·(max−min)/(2·mean): half the range around the mean, in % (0 for an empty or zero series)."""
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return 100.0 * (max(values) - min(values)) / (2.0 * mean) if mean else 0.0


def _stats(values: Sequence[float]) -> dict[str, float]:
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return {"n": int(arr.size), "mean": mean, "std": std, "min": float(arr.min()), "max": float(arr.max()),
            "fluctuation_pct": fluctuation_pct(arr.tolist()), "cv_pct": 100.0 * std / mean if mean else 0.0}


def steady(t: Sequence[float], y: Sequence[float], *, warmup_fraction: float = WARMUP_FRACTION,
           warmup_min_s: float = WARMUP_MIN_S) -> tuple[list[float], list[float]]:
    """The series without its warm-up (the first ``warmup_fraction`` of its time span, at least ``warmup_min_s``;
    never more than half the span)."""
    if not t:
        return [], []
    span = t[-1] - t[0]
    cut = t[0] + min(max(warmup_fraction * span, warmup_min_s), 0.5 * span)
    pairs = [(a, b) for a, b in zip(t, y) if a >= cut]
    return [a for a, _ in pairs], [b for _, b in pairs]


def period_table(t: Sequence[float], y: Sequence[float], periods: int = 3) -> list[dict[str, Any]]:
    """The seed's table: the series cut into ``periods`` equal spans of time; mean, std, fluctuation per span."""
    if not t:
        return []
    start, end = t[0], t[-1]
    width = (end - start) / periods if end > start else 1.0
    rows = []
    for i in range(periods):
        lo, hi = start + i * width, start + (i + 1) * width
        values = [v for a, v in zip(t, y) if lo <= a < hi or (i == periods - 1 and a == hi)]
        if values:
            rows.append({"period": i + 1, "from_s": lo, "to_s": hi, **_stats(values)})
    return rows


def fit(t: Sequence[float], y: Sequence[float], *, confidence: float = 0.95) -> dict[str, Any]:
    """Least-squares slope of ``y`` over ``t`` (units per second), its confidence interval, and the drift it
    implies over the series (absolute and in % of the mean)."""
    from scipy import stats

    n = len(t)
    mean = sum(y) / n if n else 0.0
    if n < 3 or t[-1] == t[0]:
        return {"n": n, "slope": 0.0, "intercept": mean, "stderr": None, "ci": [None, None], "significant": False,
                "drift": 0.0, "drift_pct": 0.0, "span_s": (t[-1] - t[0]) if n else 0.0, "confidence": confidence}
    if len(set(y)) == 1:  # a constant series: no slope, and no uncertainty about it
        slope, intercept, stderr = 0.0, float(y[0]), 0.0
    else:
        res = stats.linregress(t, y)
        slope, intercept, stderr = float(res.slope), float(res.intercept), float(res.stderr)
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 2)) * stderr
    lo, hi = slope - half, slope + half
    span = t[-1] - t[0]
    drift = slope * span
    return {"n": n, "slope": slope, "intercept": intercept, "stderr": stderr, "ci": [lo, hi],
            "significant": bool(stderr > 0 and (lo > 0 or hi < 0)), "drift": drift,
            "drift_pct": 100.0 * drift / mean if mean else 0.0, "span_s": span, "t_from": t[0], "t_to": t[-1],
            "confidence": confidence}


def leak_verdict(t: Sequence[float], y: Sequence[float], *, drift_threshold_pct: float = 1.0,
                 confidence: float = 0.95) -> dict[str, Any]:
    """A memory series leaks when its slope is significantly positive and the drift over the series exceeds
    ``drift_threshold_pct`` of its mean."""
    result = fit(t, y, confidence=confidence)
    leak = bool(result["significant"] and result["slope"] > 0 and result["drift_pct"] > drift_threshold_pct)
    return {**result, "leak": leak, "drift_threshold_pct": drift_threshold_pct,
            "last_third": _last_third(t, y, confidence)}


def _last_third(t: Sequence[float], y: Sequence[float], confidence: float) -> dict[str, Any] | None:
    """The slope over the last third of the window (a diagnostic beside the verdict, which it does not change): a
    leak keeps its slope to the end; a process whose memory settles after start-up (the allocator's arenas, caches
    filling) has most of its slope early. In a 9-minute soak RSS rose 1.15 KiB/s over its first 140 s and 0.04-0.10
    over its last 190 s, and the whole window's least-squares slope was significant."""
    if len(t) < 9:
        return None
    start = t[0] + 2.0 * (t[-1] - t[0]) / 3.0
    tail = [(a, b) for a, b in zip(t, y) if a >= start]
    if len(tail) < 3:
        return None
    late = fit([a for a, _ in tail], [b for _, b in tail], confidence=confidence)
    return {"from_s": start, "n": late["n"], "slope": late["slope"], "ci": late["ci"],
            "significant": late["significant"]}


def count_verdict(t: Sequence[float], counts: Sequence[float], *, window: int = 10,
                  confidence: float = 0.95) -> dict[str, Any]:
    """Handles, fds or threads: the floor of the first and last ``window`` samples; a leak is a floor that rose
    with a significantly positive slope."""
    if not counts:
        return {"start": None, "end": None, "growth": 0, "leak": False, "slope": 0.0, "ci": [None, None]}
    w = max(1, min(window, len(counts) // 3 or 1))
    start, end = min(counts[:w]), min(counts[-w:])
    result = fit(t, counts, confidence=confidence)
    growth = end - start
    leak = bool(growth > 0 and result["significant"] and result["slope"] > 0)
    return {"start": start, "end": end, "growth": growth, "leak": leak, "slope": result["slope"],
            "ci": result["ci"], "significant": result["significant"], "n": len(counts)}


def analyze_segment(samples: Sequence[Mapping[str, Any]], *, periods: int = 3, drift_threshold_pct: float = 1.0,
                    warmup_fraction: float = WARMUP_FRACTION, warmup_min_s: float = WARMUP_MIN_S,
                    min_window_s: float = MIN_WINDOW_S) -> dict[str, Any]:
    """Table, fit and verdicts of one process's samples (one incarnation of a rank). A memory series whose window
    after the warm-up is shorter than ``min_window_s`` (or ``MIN_WINDOW_SAMPLES``) gets its table and fit but no
    verdict: ``judged`` False, and its name in ``not_judged``."""
    out: dict[str, Any] = {"samples": len(samples),
                           "span_s": (samples[-1]["t"] - samples[0]["t"]) if samples else 0.0, "leaks": [],
                           "not_judged": []}
    for key in (*SERIES, *COUNTS):
        pairs = [(float(s["t"]), float(s[key])) for s in samples if s.get(key) is not None]
        t, y = steady([a for a, _ in pairs], [b for _, b in pairs], warmup_fraction=warmup_fraction,
                      warmup_min_s=warmup_min_s)
        if len(t) < 3:
            if pairs and key in SERIES:  # sampled, but too few samples for even a fit: not judged, and said so
                out["not_judged"].append(key)
            continue
        if key in SERIES:
            verdict = leak_verdict(t, y, drift_threshold_pct=drift_threshold_pct)
            verdict["judged"] = (t[-1] - t[0]) >= min_window_s and len(t) >= MIN_WINDOW_SAMPLES
            if not verdict["judged"]:
                verdict["leak"] = False
                out["not_judged"].append(key)
            out[key] = {"table": period_table(t, y, periods), **_stats(y), "fit": verdict}
        else:
            verdict = count_verdict(t, y)
            out[key] = {**verdict, "first": int(pairs[0][1]), "last": int(pairs[-1][1])}
        if verdict["leak"]:
            out["leaks"].append(key)
    return out


def analyze_run(by_rank: Mapping[int, Sequence[Sequence[Mapping[str, Any]]]], *, periods: int = 3,
                drift_threshold_pct: float = 1.0, warmup_fraction: float = WARMUP_FRACTION,
                warmup_min_s: float = WARMUP_MIN_S, min_window_s: float = MIN_WINDOW_S,
                since_s: float = 0.0) -> dict[str, Any]:
    """Every rank's verdicts from its longest incarnation (a restarted process starts a new series), and the run's:
    ``leaks`` (``"rank 2: handles"``), ``not_judged`` (``"rank 1: heap"``: a window too short for a verdict; see
    :func:`analyze_segment`), the largest fluctuation and drift, and the causes to report. ``since_s``:
    only samples from then on (a run with faults: after the heal, when no process is killed, paused or cut off and
    process groups are no longer rebuilt)."""
    if since_s:
        by_rank = {r: [kept for seg in segs if (kept := [s for s in seg if s["t"] >= since_s])]
                   for r, segs in by_rank.items()}
    ranks: dict[str, Any] = {}
    leaks: list[str] = []
    not_judged: list[str] = []
    causes: list[str] = []
    fluct = drift = 0.0
    for rank, segments in sorted(by_rank.items()):
        if not segments:
            ranks[str(rank)] = {"samples": 0, "incarnations": 0}
            continue
        longest = max(segments, key=lambda s: (s[-1]["t"] - s[0]["t"]) if s else 0.0)
        result = analyze_segment(longest, periods=periods, drift_threshold_pct=drift_threshold_pct,
                                 warmup_fraction=warmup_fraction, warmup_min_s=warmup_min_s,
                                 min_window_s=min_window_s)
        result["incarnations"] = len(segments)
        result["incarnation"] = longest[0].get("incarnation")
        ranks[str(rank)] = result
        for key in SERIES:
            if key in result:
                fluct = max(fluct, max((row["fluctuation_pct"] for row in result[key]["table"]), default=0.0))
                drift = max(drift, result[key]["fit"]["drift_pct"])
        for key in result["leaks"]:
            leaks.append(f"rank {rank}: {key}")
            causes.append(_cause(rank, key, result[key]))
        not_judged.extend(f"rank {rank}: {key}" for key in result["not_judged"])
    return {"ranks": ranks, "leaks": leaks, "not_judged": not_judged, "min_window_s": min_window_s,
            "causes": causes, "max_fluctuation_pct": fluct, "max_drift_pct": drift,
            "drift_threshold_pct": drift_threshold_pct, "periods": periods, "since_s": since_s}


def detection_time(samples: Sequence[Mapping[str, Any]], key: str, *, drift_threshold_pct: float = 1.0,
                   warmup_fraction: float = WARMUP_FRACTION, warmup_min_s: float = WARMUP_MIN_S) -> float | None:
    """The earliest sample time at which the samples so far already give ``key``'s leak verdict (None: never)."""
    for end in range(4, len(samples) + 1):
        result = analyze_segment(samples[:end], drift_threshold_pct=drift_threshold_pct,
                                 warmup_fraction=warmup_fraction, warmup_min_s=warmup_min_s)
        if key in result["leaks"]:
            return float(samples[end - 1]["t"])
    return None


def _cause(rank: int, key: str, result: Mapping[str, Any]) -> str:
    if key in SERIES:
        f = result["fit"]
        return (f"memory leak: rank {rank} {key} grows {f['slope'] / 1024:.1f} KiB/s (95% CI {f['ci'][0] / 1024:.1f}"
                f"..{f['ci'][1] / 1024:.1f}), {f['drift_pct']:.2f}% over {f['span_s']:.0f} s > "
                f"{f['drift_threshold_pct']:g}%")
    return (f"{key} leak: rank {rank} live {key} rose from {result['start']:g} to {result['end']:g} "
            f"(slope {result['slope']:.3g}/s, 95% CI {result['ci'][0]:.3g}..{result['ci'][1]:.3g})")


def table_lines(analysis: Mapping[str, Any], key: str = "rss") -> list[str]:
    """The per-period table as text lines (MiB), one block per rank."""
    lines = [f"{'rank':>4} {'period':>6} {'from..to s':>14} {'mean MiB':>10} {'std MiB':>9} {'fluct %':>8} {'cv %':>7}"]
    for rank, result in analysis["ranks"].items():
        for row in result.get(key, {}).get("table", []):
            lines.append(f"{rank:>4} {row['period']:>6} {row['from_s']:>6.0f}..{row['to_s']:<7.0f}"
                         f"{row['mean'] / 2**20:>10.2f} {row['std'] / 2**20:>9.3f} ±{row['fluctuation_pct']:>6.3f}"
                         f" {row['cv_pct']:>7.3f}")
    return lines


def series(by_rank: Mapping[int, Iterable[Iterable[Mapping[str, Any]]]], key: str = "rss") -> dict[int, tuple[
        list[float], list[float]]]:
    """Per rank, all incarnations' ``(t, value)`` points of ``key`` in time order (for figures)."""
    out = {}
    for rank, segments in by_rank.items():
        pts = [(float(s["t"]), float(s[key])) for seg in segments for s in seg if s.get(key) is not None]
        pts.sort()
        out[rank] = ([a for a, _ in pts], [b for _, b in pts])
    return out
