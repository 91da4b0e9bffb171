"""The whole paper's progress: per item runs done out of the total and an ETA computed from the runs done (their
wall time over the parallelism measured in this session); items with no finished run make the paper's ETA a lower
bound, and say so. A real quick item run through the suite prints its lines on stderr."""

from __future__ import annotations

from seedance.paper import suite
from seedance.paper.progress import ItemCount, PaperProgress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_eta_from_the_runs_done_and_the_measured_parallelism(capsys):
    clock = Clock()
    counts = {"protocols": ItemCount(total=10, done=0), "nccl": ItemCount(total=4, done=2, walls=[0.5, 0.5]),
              "memory": ItemCount(total=6, done=0)}
    p = PaperProgress(counts, workers=2, enabled=True, every_s=0.0, clock=clock)
    # before any run of this session: the resumed nccl runs time nccl, the workers are the parallelism
    assert p.item_eta("nccl") == 0.5 * 2 / 2 and p.item_eta("protocols") is None
    assert p.paper_eta() == (0.5, 2)
    p.start("protocols")
    for _ in range(4):  # 4 runs of 3 s in 6 s of wall: 2 runs at a time
        clock.now += 1.5
        p.listener({"point": "k"}, {"status": "ok", "wall_s": 3.0})
    assert p.parallelism() == 2.0
    assert p.item_eta("protocols") == 3.0 * 6 / 2.0  # 6 left of 3 s each, 2 at a time
    p.listener({"point": "k"}, {"status": "failed", "wall_s": 1.0})  # a failed run is not done (it reruns)
    assert counts["protocols"].done == 4
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("paper: protocols 0/10 runs, ETA ?")
    assert "paper: protocols 4/10 runs" in lines[-2] and "paper 6/20 runs, ETA >= " in lines[-1]
    assert "(1 item not yet timed)" in lines[-1]  # memory
    assert duration(75) == "75s" and duration(600) == "10m00s" and duration(7200) == "2h00m"
    # never rounded to 0 while something is left, and whole minutes / hours (the rest carried, not rounded up)
    assert duration(0.4) == "<1s" and duration(0) == "0s" and duration(-3) == "0s" and duration(None) == "?"
    assert duration(170) == "2m50s" and duration(5399) == "89m59s" and duration(7170) == "2h00m"
    assert duration(7199.6) == "2h00m" and duration(89.6) == "1m30s" and duration(3599) == "59m59s"


def test_lines_are_throttled_but_each_item_end_is_said(capsys):
    clock = Clock()
    p = PaperProgress({"a": ItemCount(total=3, done=0)}, workers=1, enabled=True, every_s=60.0, clock=clock)
    p.start("a")
    for _ in range(3):
        clock.now += 1
        p.listener({}, {"status": "ok", "wall_s": 1.0})
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["paper: a 0/3 runs, ETA ? | paper 0/3 runs, ETA ? (1 item not yet timed)",
                     "paper: a 3/3 runs, ETA 0s | paper 3/3 runs, ETA 0s"]


def test_the_suite_reports_each_items_progress_counting_resumed_runs(tmp_path, capsys):
    import yaml

    from seedance.sweep.spec import merge

    doc = yaml.safe_load((suite.SPEC_DIR / "nccl.yaml").read_text())
    doc["quick"] = merge(doc["quick"], {"axes": {"grid": {"curve": ["a100-1x8-allreduce"], "size": [8, 1024]}}})
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "nccl.yaml").write_text(yaml.safe_dump(doc))
    suite.run_suite("quick", tmp_path / "out", names=["nccl"], workers=1, progress=True, spec_dir=specs)
    first = capsys.readouterr().err
    assert "paper: nccl 0/4 runs" in first and "paper: nccl 4/4 runs, ETA 0s" in first
    suite.run_suite("quick", tmp_path / "out", names=["nccl"], workers=1, progress=True, spec_dir=specs)
    assert "paper: nccl 4/4 runs, ETA 0s | paper 4/4 runs" in capsys.readouterr().err  # resumed: all done
