"""The run dir's lock, atomic writes without symlinks, and the duplicate-key repair.

No Ray: a second process is a real ``python`` subprocess holding the lock;
files and part files are real ones in a temporary folder.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube_ray import schema
from cube_ray.errors import RunDirError
from cube_ray.files import check_run_dir_links, write_atomic
from cube_ray.pipeline.parts import PartWriter, part_files
from cube_ray.pipeline.repair import repair_duplicate_keys
from cube_ray.run_lock import LOCK_NAME, held, run_dir_lock, writing_into

ROOT = Path(__file__).resolve().parents[2]

# --- write_atomic -------------------------------------------------------------


def test_a_symlinked_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious", encoding="utf-8")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.html").symlink_to(outside)
    write_atomic(run_dir / "report.html", "<html>")
    assert outside.read_text(encoding="utf-8") == "precious"
    assert not (run_dir / "report.html").is_symlink()
    assert (run_dir / "report.html").read_text(encoding="utf-8") == "<html>"


def test_a_failed_write_leaves_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    path.write_text("previous", encoding="utf-8")

    def disk_full(fh: IO[Any]) -> None:
        fh.write(b"half a rep")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, disk_full)
    assert path.read_text(encoding="utf-8") == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_written_files_get_the_usual_permissions(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "summary.json", "{}")
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_symlinked_folder_leading_outside_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "inner").mkdir()
    (run_dir / "answers").symlink_to(run_dir / "inner")  # inside: fine
    check_run_dir_links(run_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "scores").symlink_to(elsewhere)
    with pytest.raises(RunDirError) as info:
        check_run_dir_links(run_dir)
    text = str(info.value)
    assert f"'scores' is a symlink to {str(elsewhere)!r}, outside the run dir" in text
    assert "Fix: replace the link by a folder" in text
    (run_dir / "scores").unlink()
    (run_dir / "logs").symlink_to(tmp_path / "nowhere")  # dangling: refused too
    with pytest.raises(RunDirError, match="'logs' is a symlink to"):
        check_run_dir_links(run_dir)
    (run_dir / "logs").unlink()
    (run_dir / "scores").symlink_to(elsewhere)
    # A run dir that is itself a link (to a larger disk) is fine.
    (elsewhere / "scores").mkdir()
    (run_dir / "scores").unlink()
    link = tmp_path / "link"
    link.symlink_to(run_dir)
    check_run_dir_links(link)


# --- the lock -------------------------------------------------------------------

_HOLDER = """
import sys, time
from cube_ray.run_lock import run_dir_lock
with run_dir_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_second_process_is_refused_naming_the_owner(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(run_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirError) as info, run_dir_lock(run_dir):
            pass
        text = str(info.value)
        assert f"run dir {str(run_dir)!r} is in use by another cube-ray process" in text
        assert f"pid {holder.pid} on host {socket.gethostname()}" in text
        assert "choose another --out" in text
        with pytest.raises(RunDirError), writing_into(run_dir):
            pass  # aggregate, report and audit are refused too
    finally:
        holder.kill()
        holder.wait()
    # The holder was killed: its lock is stale, and taken over with a message.
    said: list[str] = []
    with run_dir_lock(run_dir, say=said.append) as lock:
        owner = json.loads(lock.read_text(encoding="utf-8"))
        assert owner["pid"] == os.getpid()
        assert held(run_dir)
    assert len(said) == 1
    assert f"the lock of pid {holder.pid} on host" in said[0]
    assert "is stale (that process is gone); taken over" in said[0]
    assert not (run_dir / LOCK_NAME).exists()


def test_another_hosts_lock_is_never_taken_over(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    owner = {"pid": 1, "host": "other-host", "started": "2026-01-01T00:00:00+00:00"}
    (run_dir / LOCK_NAME).write_text(json.dumps(owner), encoding="utf-8")
    with pytest.raises(RunDirError) as info, run_dir_lock(run_dir):
        pass
    text = str(info.value)
    assert "pid 1 on host other-host, started 2026-01-01T00:00:00+00:00" in text
    assert f"delete {str(run_dir / LOCK_NAME)!r} and rerun" in text


def test_a_refused_new_run_dir_is_removed_again(tmp_path: Path) -> None:
    run_dir = tmp_path / "new"

    def refused() -> None:
        with run_dir_lock(run_dir):
            assert (run_dir / LOCK_NAME).is_file()
            raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        refused()
    assert not run_dir.exists()
    with run_dir_lock(run_dir), run_dir_lock(run_dir):  # nested: held once
        (run_dir / "manifest.json").write_text("{}", encoding="utf-8")
    assert sorted(p.name for p in run_dir.iterdir()) == ["manifest.json"]


def test_two_takers_of_a_stale_lock_one_wins(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owner = {"pid": dead.pid, "host": socket.gethostname(), "started": "then"}
    (run_dir / LOCK_NAME).write_text(json.dumps(owner), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = _HOLDER.replace("time.sleep(60)", "time.sleep(3)")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(run_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes[0] == 0
    assert codes[1] != 0  # the other one is refused while the winner holds it
    loser = next(err for (out, err), p in zip(outs, procs, strict=True) if p.returncode)
    assert "is in use by another cube-ray process" in loser


# --- the duplicate-key repair ---------------------------------------------------


def _answers(qids: list[str], *, answer: str, status: str = "ok") -> pa.Table:
    n = len(qids)
    return pa.table(
        {
            schema.QUESTION_ID: qids,
            schema.SYSTEM: ["rag"] * n,
            schema.ANSWER: [f"{answer} {q}" for q in qids],
            schema.STATUS: [status] * n,
            schema.CONTENT_HASH: [f"h-{q}" for q in qids],
        }
    )


def _write(table_dir: Path, stamp: str, table: pa.Table) -> None:
    writer = PartWriter(table_dir, run_stamp=stamp, stage="rag", schema_=None)
    writer.write(table)
    writer.flush()


def _rows(table_dir: Path) -> list[dict[str, Any]]:
    tables = [pq.read_table(f) for f in part_files(table_dir)]
    rows = pa.concat_tables(tables).to_pylist()
    return sorted(rows, key=lambda r: r[schema.QUESTION_ID])


def test_duplicate_keys_keep_the_earliest_row(tmp_path: Path) -> None:
    answers = tmp_path / "answers"
    _write(answers, "20260101T000000000000Z", _answers(["q1", "q2", "q3"], answer="a"))
    # A second run at once wrote q2, q3 again, and q4; q3's first row failed.
    _write(answers, "20260101T000001000000Z", _answers(["q2", "q4"], answer="b"))
    _write(
        answers,
        "20260101T000002000000Z",
        _answers(["q3"], answer="c", status="error"),
    )
    _write(answers, "20260101T000003000000Z", _answers(["q3"], answer="d"))
    before = part_files(answers)
    said: list[str] = []
    assert repair_duplicate_keys(tmp_path, say=said.append) == 3
    rows = _rows(answers)
    assert [(r[schema.QUESTION_ID], r[schema.ANSWER]) for r in rows] == [
        ("q1", "a q1"),
        ("q2", "a q2"),  # the earliest
        ("q3", "a q3"),
        ("q4", "b q4"),
    ]
    assert said == [
        f"run dir {str(tmp_path)!r}: answers held 3 duplicate rows (one key "
        "written twice, as by two runs at once); kept one row per key (the "
        "earliest, an ok one first), dropped 3, 4 rows left"
    ]
    assert len(part_files(answers)) == len(before) - 2  # two emptied parts gone
    assert repair_duplicate_keys(tmp_path, say=said.append) == 0
    assert len(said) == 1


def test_an_ok_row_wins_over_an_earlier_failed_one(tmp_path: Path) -> None:
    answers = tmp_path / "answers"
    _write(answers, "20260101T000000000000Z", _answers(["q1"], answer="a", status="x"))
    _write(answers, "20260101T000001000000Z", _answers(["q1"], answer="b"))
    assert repair_duplicate_keys(tmp_path, say=lambda _: None) == 1
    assert [r[schema.ANSWER] for r in _rows(answers)] == ["b q1"]


def test_rows_of_two_input_hashes_are_left_to_the_compaction(tmp_path: Path) -> None:
    answers = tmp_path / "answers"
    _write(answers, "20260101T000000000000Z", _answers(["q1"], answer="a"))
    newer = _answers(["q1"], answer="b").set_column(
        4, schema.CONTENT_HASH, pa.array(["h-new"])
    )
    _write(answers, "20260101T000001000000Z", newer)
    assert repair_duplicate_keys(tmp_path, say=lambda _: None) == 0
    assert len(_rows(answers)) == 2
    assert (answers / ".compact-pending-rag").exists()


def test_no_duplicates_reads_no_more_than_the_keys(tmp_path: Path) -> None:
    answers = tmp_path / "answers"
    qids = [f"q{i}" for i in range(2000)]
    _write(answers, "20260101T000000000000Z", _answers(qids, answer="a"))
    mtimes = [f.stat().st_mtime_ns for f in part_files(answers)]
    start = time.monotonic()
    assert repair_duplicate_keys(tmp_path, say=lambda _: None) == 0
    assert time.monotonic() - start < 5
    assert [f.stat().st_mtime_ns for f in part_files(answers)] == mtimes


def test_report_on_a_full_disk_keeps_the_previous_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``report`` used to leave report.html at 0 bytes on a full disk."""
    from cube_ray.report import _report, write_report
    from tests.unit.test_report_worked import _worked_run

    run = _worked_run(tmp_path / "run")
    write_report(run, n_resamples=20)
    before = (run / "report.html").read_bytes()
    assert len(before) > 1000

    def full_disk(path: Any, data: Any, **kw: Any) -> Path:
        def half(fh: IO[Any]) -> None:
            fh.write(data.encode()[:100])
            raise OSError(errno.ENOSPC, "No space left on device")

        return write_atomic(path, half, **kw)

    monkeypatch.setattr(_report, "write_atomic", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_report(run, n_resamples=20)
    assert (run / "report.html").read_bytes() == before
    assert not list(run.glob(".tmp-*"))
