"""The one figure style (seedance.analysis.style): a fixed colour per protocol, variant and preset, the same in every
figure and every process; PDF and PNG written whole; confidence intervals drawn from aggregate's columns."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from matplotlib.colors import to_hex

from seedance.analysis import style

PROTOCOLS = ("raft", "multipaxos", "epaxos", "causal", "commit")


def test_each_protocol_and_variant_has_its_own_fixed_colour():
    colours = [style.color(p) for p in PROTOCOLS]
    assert len(set(colours)) == len(PROTOCOLS)
    assert style.color("buggy") != style.color("fixed")
    assert style.color("crdt") == style.color("causal")
    assert all(c in style.PALETTE for c in colours)  # the colour-blind-safe palette only
    # a second series of one protocol keeps its colour and changes its dash
    assert style.color("multipaxos+batch") == style.color("multipaxos")
    assert style.line_style("multipaxos+batch") != style.line_style("multipaxos")
    assert style.color("Raft") == style.color("raft")


def test_unknown_names_get_the_same_colour_in_every_process():
    names = ["qsgd:4", "nosuch-protocol", "dgx-a100+4 servers"]
    here = [style.color(n) for n in names]
    code = f"from seedance.analysis import style; print(','.join(style.color(n) for n in {names!r}))"
    there = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()
    assert there.split(",") == here
    assert style.color("dgx-a100+4 servers") == style.color("dgx-a100")


def test_labels_carry_units():
    assert style.label("throughput_ops_s") == "throughput (ops/s)"
    assert style.label("latency_ms_p99_mean") == "p99 latency (ms)"
    assert "(GB/s)" in style.label("busbw_GBps")
    assert style.label("some_column") == "some column"


def _aggregated() -> pd.DataFrame:
    rows = []
    for protocol, base in (("raft", 100.0), ("epaxos", 80.0), ("raft+background", 50.0)):
        for x in (0.0, 0.5, 1.0):
            rows.append({"protocol": protocol, "conflict_rate": x, "n": 3, "throughput_ops_s_mean": base - 10 * x,
                         "throughput_ops_s_lo": base - 10 * x - 2, "throughput_ops_s_hi": base - 10 * x + 3})
    return pd.DataFrame(rows)


def test_ci_lines_use_the_fixed_colours_and_draw_the_interval():
    figure, axes = style.new_figure(1, 1)
    ax = axes[0, 0]
    style.ci_lines(ax, _aggregated(), x="conflict_rate", metric="throughput_ops_s", hue="protocol")
    lines = {line.get_label(): line for line in ax.lines}
    assert to_hex(lines["raft"].get_color()) == style.color("raft")
    assert to_hex(lines["epaxos"].get_color()) == style.color("epaxos")
    assert lines["raft+background"].get_linestyle() == ":"
    assert list(lines["raft"].get_ydata()) == [100.0, 95.0, 90.0]
    bands = ax.collections
    assert len(bands) == 3  # one CI band per series
    top = bands[0].get_paths()[0].vertices[:, 1]
    assert top.max() == pytest.approx(103.0) and top.min() == pytest.approx(88.0)
    assert ax.get_ylabel() == "throughput (ops/s)"


def test_ci_bars_error_bars_span_lo_to_hi():
    figure, axes = style.new_figure(1, 1)
    frame = _aggregated().rename(columns={"protocol": "variant"})
    frame = frame[frame["conflict_rate"] == 0.0].assign(variant=["buggy", "fixed", "fixed+x"])
    style.ci_bars(axes[0, 0], frame, x="conflict_rate", metric="throughput_ops_s", hue="variant")
    bars = axes[0, 0].patches
    assert [to_hex(b.get_facecolor()) for b in bars] == [style.color("buggy"), style.color("fixed"),
                                                         style.color("fixed")]
    assert [b.get_height() for b in bars] == [100.0, 80.0, 50.0]


def test_save_writes_whole_pdf_and_png(tmp_path):
    figure, axes = style.new_figure(1, 1)
    axes[0, 0].plot([1, 2], [3, 4])
    paths = style.save(figure, tmp_path / "sub" / "f")
    assert [p.name for p in paths] == ["f.pdf", "f.png"]
    assert paths[0].read_bytes()[:5] == b"%PDF-" and paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["f.pdf", "f.png"]  # no partial file left


def test_base_two_axes_label_sizes_in_binary_units():
    """A size axis (base 2) reads 1K .. 4G, never 2e+04; other bases keep the plain log labels."""
    from matplotlib.ticker import FuncFormatter, LogFormatter

    from seedance.analysis import style

    assert [style.binary_label(v) for v in (512, 1024, 16384, 3 * 2 ** 20, 1.5 * 2 ** 30, 2 ** 32)] == [
        "512", "1K", "16K", "3M", "1.5G", "4G"]
    figure, axes = style.new_figure(2, 1)
    style.log_scale(axes[0][0], "x", base=2)
    style.log_scale(axes[0][1], "both")
    assert isinstance(axes[0][0].xaxis.get_major_formatter(), FuncFormatter)
    assert isinstance(axes[0][1].yaxis.get_major_formatter(), LogFormatter)
    axes[0][0].plot([1024, 1 << 30], [1, 2])
    figure.canvas.draw()
    labels = [t.get_text() for t in axes[0][0].get_xticklabels() if t.get_text()]
    assert labels and all("e+" not in label for label in labels)
