"""What every replica of the causal protocol shares in one process: the strings naming pixels and clock entries,
and the immutable effects that many replicas emit equal (see :func:`_ack`, :func:`_applied`). Nothing here is
state of a replica: the same objects would be made anew otherwise."""

from __future__ import annotations

from typing import Any

from seedance.models.crdt import ENTRY_BYTES
from seedance.models.protocols.causal.messages import HEADER_BYTES, Ack
from seedance.models.protocols.contract import Observe, PersistRecords, Send, SetTimer

CLOCK_PREFIX = "c"  # the grid table's record of clock entry j is "c{j}"
CLOCK_ENTRY_BYTES = 12  # a record key and an int64


def key_of(pixel: int) -> str:
    """The history key of flat pixel ``pixel`` (``k<pixel>``), one shared string per pixel."""
    return _PIXEL_KEYS[pixel]


class _Names(dict):
    """``prefix + str(i)`` for each int ``i``, made once and shared: every replica's keys, records and observations
    of pixel ``i`` hold the same string object (at 1,024 replicas a separate string per record was about 54 bytes
    times a million records per simulated second)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def __missing__(self, i: int) -> str:
        name = self[i] = f"{self.prefix}{i}"
        return name


def _ack(dst: int, epoch: int, held: int) -> Send:
    """The Send of ``Ack(epoch, held)`` to ``dst``. Equal ones are one object (the last made per ``dst``, kept for
    the process): in the simulator every receiver of a write acknowledges it to the writer with the same message,
    one after another (1,023 at 1,024 replicas), and making the Ack and the Send is most of the cost of that."""
    last = _ACKS.get(dst)
    if last is not None and last.message.held == held and last.message.epoch == epoch:
        return last
    made = _ACKS[dst] = Send(dst=dst, message=Ack(epoch=epoch, held=held), size_bytes=HEADER_BYTES)
    return made


def _applied(pixel: int, value: int) -> Observe:
    """``Observe("apply", k{pixel}, value)``. Equal ones are one object (the last made per pixel, kept for the
    process), as :func:`_ack`'s: every replica applies each write (1,024 equal observations at 1,024 replicas)."""
    last = _APPLIED.get(pixel)
    if last is not None and last.value == value:
        return last
    made = _APPLIED[pixel] = Observe(what="apply", key=_PIXEL_KEYS[pixel], value=value)
    return made


def _one_step(table: str, pixel: int, entry: tuple, j: int, value: int) -> PersistRecords:
    """``PersistRecords`` of one pixel's ``entry`` and clock entry ``j`` at ``value`` (in that order), handed
    over. Equal ones are one object (the last made, kept for the process), as :func:`_ack`'s: every receiver of a
    write persists the same pixel and the same entry of the writer's (1,023 equal steps at 1,024 replicas); the
    put mapping and its tuples are never changed, so every simulated disk may keep them."""
    last = _STEP[0]
    if last is not None and last[2] is entry and last[1] == pixel and last[3] == j and last[4] == value \
            and last[0] == table:  # (the same entry tuple: PixelGrid.entry of the pixel one delta wrote)
        return last[5]
    made = PersistRecords(table=table, put={_PIXEL_RECORDS[pixel]: entry, _CLOCK_RECORDS[j]: value},
                          handed_over=True, size_bytes=ENTRY_BYTES + CLOCK_ENTRY_BYTES)
    _STEP[0] = (table, pixel, entry, j, value, made)
    return made


def _timer(name: str, delay_s: float) -> SetTimer:
    """``SetTimer(name, delay_s)``, one object per name and delay (kept for the process), as :func:`_ack`'s: every
    replica sets its sync timer again at every tick (at 1,024 replicas, 200,000 equal effects a simulated second)."""
    made = _TIMERS.get((name, delay_s))
    if made is None:
        made = _TIMERS[name, delay_s] = SetTimer(name=name, delay_s=delay_s)
    return made


_TIMERS: dict[tuple[str, float], SetTimer] = {}  # (name, delay) -> the SetTimer _timer made (immutable, shared)
_STEP: list[Any] = [None]  # (table, pixel, entry, j, value, the PersistRecords _one_step made last)
_ACKS: dict[int, Send] = {}  # dst -> the Send _ack made last for it (immutable: shared by every replica)
_APPLIED: dict[int, Observe] = {}  # pixel -> the Observe _applied made last for it (immutable, shared)
_PIXEL_KEYS = _Names("k")  # key_of(i)
_PIXEL_RECORDS = _Names("p")  # the grid table's record of pixel i
_CLOCK_RECORDS = _Names(CLOCK_PREFIX)  # the grid table's record of clock entry j
