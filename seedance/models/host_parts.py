"""The host model's smaller parts (:mod:`seedance.models.host`): per-entry frame costs, garbage collections, slow
spells (an Ornstein-Uhlenbeck factor on every CPU cost), the shared disk's stalls, other tenants and a device.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seedance.errors import SpecError
from seedance.models.service_times import Empirical, LogNormal, _service_dict, service_time_from_dict


@dataclass(frozen=True)
class EntryCosts:
    """CPU per log entry a message carries: ``send_s`` to encode one (protocol codec, frame), ``recv_s`` to decode
    one; ``mean_in`` / ``mean_out`` are the profile run's mean entries per message received / sent, where the
    per-kind costs already hold them (a message pays ``cost × (entries − mean)`` on top)."""

    send_s: float
    recv_s: float
    mean_in: float
    mean_out: float

    FIELDS = ("send_s", "recv_s", "mean_in", "mean_out")

    def __post_init__(self) -> None:
        from seedance import validation as V

        for name in self.FIELDS:
            V.number(f"host profile entries.{name}", getattr(self, name), lo=0)

    def received(self, entries: int) -> float:
        return self.recv_s * (entries - self.mean_in)

    def sent(self, entries: int) -> float:
        return self.send_s * (entries - self.mean_out)

    def scaled(self, factor: float) -> EntryCosts:
        return EntryCosts(self.send_s * factor, self.recv_s * factor, self.mean_in, self.mean_out)

    @classmethod
    def from_dict(cls, data: Any, where: str) -> EntryCosts:
        if not isinstance(data, Mapping) or set(data) != set(cls.FIELDS):
            raise SpecError(where, f"expected {{{', '.join(cls.FIELDS)}}}, got {data!r}",
                            "send_s, recv_s (s per entry), mean_in, mean_out (entries per message)")
        return cls(**{k: data[k] for k in cls.FIELDS})


@dataclass(frozen=True)
class GcProfile:
    """A process's older-generation garbage collections: each handled item (operation) runs one with probability
    ``rate``, which pauses the process for a draw of ``pause``.

    With ``full`` (the full collections' pauses, generation 2), the collections of one incarnation are counted, as
    CPython counts them: the ``full_first``-th is a full one, then every ``full_period``-th (the interpreter runs
    generation 2 once ``threshold2`` generation-1 collections have passed: 12 for the default thresholds), and the
    others draw ``pause`` (generation 1 only). A node forked from the zygote inherits the zygote's counts, so its
    first full collection comes early (its 6th here, the 4th of those drawn per item: the few every process makes
    at its start are not drawn, :func:`seedance.real.profile.fit_gc`), and a restarted node counts again. Without
    ``full`` (a profile from before it), every collection draws the pooled ``pause``."""

    rate: float
    pause: LogNormal | Empirical
    full: LogNormal | Empirical | None = None
    full_first: int = 0
    full_period: int = 0

    def __post_init__(self) -> None:
        from seedance import validation as V

        V.number("host profile gc.rate", self.rate, lo=0, hi=1)
        if self.full is not None:
            V.integer("host profile gc.full_first", self.full_first, lo=1, hi=10_000)
            V.integer("host profile gc.full_period", self.full_period, lo=1, hi=10_000)

    def draw(self, rng: np.random.Generator, counted: list[int] | None = None) -> float:
        """One item's collection pause (0: none); ``counted``: the incarnation's collections so far, in a list of
        one (updated), where the profile has ``full``."""
        if not self.rate or rng.random() >= self.rate:
            return 0.0
        if self.full is None or counted is None:
            return self.pause.draw(rng)
        counted[0] += 1
        n = counted[0]
        if n >= self.full_first and (n - self.full_first) % self.full_period == 0:
            return self.full.draw(rng)
        return self.pause.draw(rng)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rate": self.rate, "pause": _service_dict(self.pause)}
        if self.full is not None:
            out.update({"full": _service_dict(self.full), "full_first": self.full_first,
                        "full_period": self.full_period})
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> GcProfile:
        full_keys = {"full", "full_first", "full_period"}
        if not isinstance(data, Mapping) or not {"rate", "pause"} <= set(data) <= {"rate", "pause"} | full_keys \
                or (set(data) & full_keys and not full_keys <= set(data)):
            raise SpecError(where, f"expected {{rate, pause}} and optionally {{full, full_first, full_period}}, "
                                   f"got {data!r}",
                            "rate (collections per item, 0..1), pause (a service time); full (a service time), "
                            "full_first and full_period (integers >= 1)")
        from seedance import validation as V

        rate = V.number(f"{where}.rate", data["rate"], lo=0, hi=1)
        if "full" not in data:
            return cls(float(rate), service_time_from_dict(data["pause"], f"{where}.pause"))
        return cls(float(rate), service_time_from_dict(data["pause"], f"{where}.pause"),
                   service_time_from_dict(data["full"], f"{where}.full"),
                   V.integer(f"{where}.full_first", data["full_first"], lo=1, hi=10_000),
                   V.integer(f"{where}.full_period", data["full_period"], lo=1, hi=10_000))


@dataclass(frozen=True)
class SpellProfile:
    """The host's slow spells: every CPU cost (and the loopback latency) is ``g(t)`` times its draw, where
    ``log g`` is an Ornstein-Uhlenbeck process (stationary sd ``sigma``, correlation time ``tau_s``), shifted by
    ``sigma² / 2`` so that the time average of ``1 / g`` is 1: the per-item costs were fitted on a real run that had
    the spells in it (its items came faster in the fast spells), so a run of the same length completes as many of
    them. A shared machine's cores run the same code faster and slower for tens to hundreds of milliseconds at a
    time (other virtual machines, frequency, caches), which independent per-item draws cannot reproduce: averaged
    over the items of one operation they cancel, a spell does not."""

    sigma: float
    tau_s: float

    def __post_init__(self) -> None:
        from seedance import validation as V

        V.number("host profile spell.sigma", self.sigma, lo=0, hi=1.5)
        V.number("host profile spell.tau_s", self.tau_s, lo=1e-4, hi=60,
                 why="the spells' correlation time in seconds")

    @classmethod
    def from_dict(cls, data: Any, where: str) -> SpellProfile:
        if not isinstance(data, Mapping) or set(data) != {"sigma", "tau_s"}:
            raise SpecError(where, f"expected {{sigma, tau_s}}, got {data!r}",
                            "sigma (log-sd of the spells' factor, 0..1.5), tau_s (their correlation time, s)")
        from seedance import validation as V

        return cls(V.number(f"{where}.sigma", data["sigma"], lo=0, hi=1.5),
                   V.number(f"{where}.tau_s", data["tau_s"], lo=1e-4, hi=60,
                            why="the spells' correlation time in seconds"))


def ou_window_shape(ratio: float) -> tuple[float, float]:
    """For an Ornstein-Uhlenbeck process of correlation time tau, averaged over windows of ``ratio · tau``: (the
    window averages' variance as a fraction of the process's, the correlation of adjacent windows' averages)."""
    r = float(ratio)
    if r < 1e-6:
        return 1.0, 1.0
    kept = 2.0 * (r - 1.0 + math.exp(-r)) / r ** 2
    return kept, (1.0 - math.exp(-r)) ** 2 / (r ** 2 * kept)


def fit_spell(window_sd: float, window_rho: float, window_s: float, elasticity: float = 1.0) -> SpellProfile | None:
    """The spells that give a latency series whose ``window_s`` windows' log medians have sd ``window_sd`` and
    lag-1 correlation ``window_rho`` (sampling noise already removed), where the latency moves as ``g ** elasticity``
    (1: all of it is CPU; less where an fsync's wall time, which spells leave alone, is part of it). The
    correlation gives tau (inverting :func:`ou_window_shape`), the sd then sigma. None without spells (sd 0 or no
    positive correlation: what varies from window to window is then sampling, not spells)."""
    from scipy.optimize import brentq

    if not (window_sd > 0 and window_s > 0 and elasticity > 0) or not (window_rho > 0):
        return None
    rho = min(float(window_rho), 0.99)
    # the adjacent windows' correlation falls from 1 (tau >> window) towards 0 (tau << window)
    lo, hi = 1e-3, 50.0
    ratio = lo if ou_window_shape(lo)[1] <= rho else (hi if ou_window_shape(hi)[1] >= rho else
                                                        brentq(lambda r: ou_window_shape(r)[1] - rho, lo, hi))
    kept, _ = ou_window_shape(ratio)
    sigma = window_sd / elasticity / math.sqrt(kept)
    return SpellProfile(float(min(sigma, 1.5)), float(min(max(window_s / ratio, 1e-4), 60.0)))


class SpellProcess:
    """A run's draw of :class:`SpellProfile`: ``log g`` on a grid of ``step_s`` (a tenth of tau, at most 5 ms),
    drawn from its own generator as far as asked (so the other draws of a run do not depend on it), held constant
    within a step. ``factor(t)`` is ``g`` at time ``t``."""

    def __init__(self, spell: SpellProfile, rng: np.random.Generator) -> None:
        self.step_s = min(spell.tau_s / 10.0, 0.005)
        self._keep = math.exp(-self.step_s / spell.tau_s)
        self._kick = spell.sigma * math.sqrt(1.0 - self._keep ** 2)
        self._shift = spell.sigma ** 2 / 2.0
        self._rng = rng
        self._x = spell.sigma * float(rng.standard_normal())  # stationary from the start
        self._g = [math.exp(self._x + self._shift)]

    def factor(self, t: float) -> float:
        index = int(t / self.step_s) if t > 0 else 0
        g = self._g
        while index >= len(g):
            self._x = self._x * self._keep + self._kick * float(self._rng.standard_normal())
            g.append(math.exp(self._x + self._shift))
        return g[index]


@dataclass(frozen=True)
class DiskStallProfile:
    """The shared disk's stalls: at ``rate_per_s`` (a Poisson process over the run), the device stops for one of
    ``durations_s`` (drawn uniformly: the stalls measured), and every fsync in flight on it, of any node, is held
    for as long as the stall overlaps it. What a run's fsyncs show as a handful of 40-95 ms waits among thousands
    of 0.3 ms ones, the three nodes' at the same moment (their intervals overlap on the shared clock): one event
    of the device, not three independent tails. Drawn per fsync from the quantiles instead, each node met them
    apart, three times as often, and the quantile table's last segment spread them evenly over 2-94 ms (a mean of
    48 ms where the measured ones averaged 30 ms), which over-predicted the held-out p99 up to 2.7x."""

    rate_per_s: float
    durations_s: tuple[float, ...]

    def __post_init__(self) -> None:
        rate, durations = self.checked(self.rate_per_s, self.durations_s, "host profile disk_stalls")
        object.__setattr__(self, "rate_per_s", rate)
        object.__setattr__(self, "durations_s", durations)

    @staticmethod
    def checked(rate: Any, durations: Any, where: str) -> tuple[float, tuple[float, ...]]:
        """``rate`` and ``durations`` validated, each error naming its field under ``where``."""
        from seedance import validation as V

        if not isinstance(durations, (list, tuple)):
            raise SpecError(f"{where}.durations_s", f"must be a list of seconds, got {durations!r}",
                            "the measured stalls' lengths in seconds")
        rate = float(V.number(f"{where}.rate_per_s", rate, lo=0, hi=1000, why="stalls per second of run"))
        if rate > 0 and not durations:
            raise SpecError(f"{where}.durations_s", "is empty but rate_per_s > 0",
                            "the measured stalls' lengths in seconds")
        return rate, tuple(float(V.number(f"{where}.durations_s[{i}]", d, lo=0, hi=60,
                                          why="seconds the device stopped")) for i, d in enumerate(durations))

    def to_dict(self) -> dict[str, Any]:
        return {"rate_per_s": self.rate_per_s, "durations_s": list(self.durations_s)}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> DiskStallProfile:
        if not isinstance(data, Mapping) or set(data) != {"rate_per_s", "durations_s"}:
            raise SpecError(where, f"expected {{rate_per_s, durations_s}}, got {data!r}",
                            "rate_per_s (stalls per second), durations_s (a list of seconds)")
        if not isinstance(data["durations_s"], list):  # a YAML list: a tuple only ever comes from code
            raise SpecError(f"{where}.durations_s", f"must be a list of seconds, got {data['durations_s']!r}",
                            "the measured stalls' lengths in seconds")
        return cls(*cls.checked(data["rate_per_s"], data["durations_s"], where))


class DiskStallProcess:
    """A run's draw of :class:`DiskStallProfile`: the stalls' windows ``[start, end)`` from their own generator,
    drawn as far as asked. :meth:`hold` is when an fsync that would run from ``start`` to ``done`` ends."""

    def __init__(self, stalls: DiskStallProfile, rng: np.random.Generator) -> None:
        self._profile = stalls
        self._rng = rng
        self._windows: list[tuple[float, float]] = []
        self._drawn = 0.0  # the windows are drawn up to here

    def _until(self, t: float) -> None:
        rate, rng = self._profile.rate_per_s, self._rng
        while self._drawn <= t:
            begin = self._drawn + float(rng.exponential(1.0 / rate))
            length = self._profile.durations_s[int(rng.integers(len(self._profile.durations_s)))]
            self._windows.append((begin, begin + length))
            self._drawn = begin + length

    def hold(self, start: float, done: float) -> float:
        """``done`` moved later by each stall's overlap with the fsync's time (it makes no progress meanwhile)."""
        if self._profile.rate_per_s <= 0:
            return done
        self._until(done)
        windows = self._windows
        i = bisect_left(windows, (start,)) - 1  # the stall that may have begun before the fsync
        i = max(i, 0)
        while i < len(windows):
            begin, end = windows[i]
            if begin >= done:
                break
            if end > start:
                done += end - max(begin, start)
                self._until(done)
            i += 1
        return done


@dataclass(frozen=True)
class TenantProfile:
    """Other tenants of a shared machine: ``busy_cores`` cores' worth of CPU, in bursts of ``slice``; ``share`` is
    the fraction of the metered busy cores that holds cores against this host's processes (fitted on the profile's
    own run: under contention the scheduler's fair share and the meter's granularity make the two differ)."""

    busy_cores: float
    slice: LogNormal
    share: float = 1.0

    def __post_init__(self) -> None:
        value = self.busy_cores
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise SpecError("host profile tenants.busy_cores", f"must be a finite number >= 0, got {value!r}")

    @classmethod
    def from_dict(cls, data: Any, where: str) -> TenantProfile:
        if not isinstance(data, Mapping) or not {"busy_cores", "slice"} <= set(data) <= {"busy_cores", "slice",
                                                                                        "share"}:
            raise SpecError(where, f"expected {{busy_cores, slice, share}}, got {data!r}",
                            "busy_cores (cores), slice, share (optional, 0..2)")
        share = data.get("share", 1.0)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 2:
            raise SpecError(f"{where}.share", f"must be a number in 0..2, got {share!r}")
        busy = data["busy_cores"]
        if isinstance(busy, bool) or not isinstance(busy, (int, float)) or not math.isfinite(busy) or busy < 0:
            raise SpecError(f"{where}.busy_cores", f"must be a finite number >= 0, got {busy!r}")
        return cls(float(busy), LogNormal.from_dict(data["slice"], f"{where}.slice"), float(share))


@dataclass(frozen=True)
class DeviceProfile:
    """A GPU host's accelerator: kind (the compute model's device kind), name, memory per device, how many, and
    optional CUDA-side costs (kernel launch latency, host-to-device and device-to-host bandwidth)."""

    kind: str
    name: str = ""
    memory_GiB: float = 0.0
    count: int = 1
    kernel_launch_s: LogNormal | None = None
    h2d_GBps: float | None = None
    d2h_GBps: float | None = None

    FIELDS = ("kind", "name", "memory_GiB", "count", "kernel_launch_s", "h2d_GBps", "d2h_GBps")

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "name": self.name, "memory_GiB": self.memory_GiB, "count": self.count}
        if self.kernel_launch_s is not None:
            out["kernel_launch_s"] = asdict(self.kernel_launch_s)
        for key in ("h2d_GBps", "d2h_GBps"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> DeviceProfile:
        from seedance.models.compute import DEVICES

        if not isinstance(data, Mapping):
            raise SpecError(where, f"expected a mapping, got {data!r}", ", ".join(cls.FIELDS))
        unknown = set(data) - set(cls.FIELDS)
        if unknown:
            raise SpecError(where, f"unknown field(s) {', '.join(sorted(unknown))}", ", ".join(cls.FIELDS))
        kind = data.get("kind")
        if not isinstance(kind, str) or not any(kind.upper().startswith(name) for name in DEVICES):
            raise SpecError(f"{where}.kind", f"unknown device kind {kind!r}",
                            f"one of {', '.join(DEVICES)} (a prefix match: A100-80GB is an A100)")
        count = data.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise SpecError(f"{where}.count", f"must be an integer >= 1, got {count!r}")
        numbers = {}
        for key in ("memory_GiB", "h2d_GBps", "d2h_GBps"):
            value = data.get(key, 0.0 if key == "memory_GiB" else None)
            if value is None:
                numbers[key] = None
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
                    value < 0 if key == "memory_GiB" else value <= 0):
                raise SpecError(f"{where}.{key}", f"must be a finite number {'>= 0' if key == 'memory_GiB' else '> 0'},"
                                f" got {value!r}")
            numbers[key] = float(value)
        launch = data.get("kernel_launch_s")
        return cls(kind=kind, name=str(data.get("name", "")), count=count, memory_GiB=numbers["memory_GiB"],
                   kernel_launch_s=None if launch is None else LogNormal.from_dict(launch, f"{where}.kernel_launch_s"),
                   h2d_GBps=numbers["h2d_GBps"], d2h_GBps=numbers["d2h_GBps"])
