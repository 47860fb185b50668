"""The human audit end to end through ``cube-ray run``: run, draw the audit
sheet, fill it, import it, then ``run --human`` on the same run dir calibrates
the summary (CUBE_METHOD.md section 13) without redoing any engine work; a
human file naming an unknown question is exit 2 and loses nothing."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from cube_ray.audit import AuditKey
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

N_DOCS, AUDIT = 40, 16
TABLES = ("documents", "questions", "answers", "scores")


def cube_ray(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def parts(run_dir: Path) -> dict[str, float]:
    """Every part file of the run's tables with its modification time."""
    return {
        str(p.relative_to(run_dir)): p.stat().st_mtime
        for table in TABLES
        for p in (run_dir / table).rglob("*.parquet")
    }


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(900)
def test_run_audit_import_then_run_with_human(tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    config = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    run_dir = tmp_path / "run"
    first = cube_ray("run", config, "--out", run_dir, "--no-progress")
    assert first.returncode == 0, first.stderr[-3000:]
    before = parts(run_dir)
    assert before

    drawn = cube_ray("audit", run_dir, "--size", AUDIT)
    assert drawn.returncode == 0, drawn.stderr
    sheet = run_dir / "audit" / f"audit-{AUDIT}.csv"
    key = AuditKey.read(run_dir / "audit" / f"audit-{AUDIT}.key.json")
    rows = list(csv.reader(io.StringIO(sheet.read_text(encoding="utf-8-sig"))))
    header, body = rows[0], rows[1:]
    dims = [d.name for d in key.dimensions]
    assert len(header) == 5 + len(dims)

    # People tell the bounds apart (zero 2, full 9) and score the system's
    # answers from judge j1's scores, 1.5 points harsher: their figure is defined.
    scores = pl.read_parquet(run_dir / "scores")
    j1 = {
        (q, s, d): v
        for q, s, d, v in scores.filter(pl.col("judge") == "j1")
        .select("question_id", "system", "dimension", "score")
        .iter_rows()
    }
    fixed = {"zero": 2.0, "full": 9.0}
    filled = [header]
    for row, k in zip(body, key.rows, strict=True):
        harsher = [j1[(k.question_id, k.system, d)] - 1.5 for d in dims]
        values = [f"{fixed.get(k.system, min(8.5, max(3.5, v))):.1f}" for v in harsher]
        filled.append([*row[:5], *values])
    buffer = io.StringIO()
    csv.writer(buffer).writerows(filled)
    done = tmp_path / "filled.csv"
    done.write_text(buffer.getvalue(), encoding="utf-8-sig")
    imported = cube_ray("audit", run_dir, "--import", done)
    assert imported.returncode == 0, imported.stderr
    human = run_dir / "audit" / "human.csv"
    assert pl.read_csv(human)["question_id"].n_unique() == AUDIT

    calibrated = cube_ray(
        "run", config, "--out", run_dir, "--no-progress", "--human", human
    )
    assert calibrated.returncode == 0, calibrated.stderr[-3000:]
    assert parts(run_dir) == before, "run --human redid engine work"
    # The console says the calibrated figures (issue 36): the headline's, or
    # without one (no judge separates these fake bounds) each judge's.
    (line,) = [
        x.strip()
        for x in calibrated.stdout.splitlines()
        if x.strip().startswith("calibrated: rag: ")
    ]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["calibration"] is not None
    # Section 10 on the audit: these people tell the bounds apart.
    assert summary["calibration"]["people_separation"]["rag"]["separated"]
    assert summary["calibration"]["reasons"] == {}
    figures = summary["calibrated"]
    assert set(figures) == {"j1", "j2"}
    for name, judge in figures.items():
        if summary["calibration"]["across_judges"].get("rag", {}).get("cube") is None:
            assert f"{name} {judge['rag']['cube']:.1f} [" in line, line
    for judge in figures.values():
        figure = judge["rag"]
        assert figure["n_labeled"] == AUDIT
        assert 0.0 <= figure["lambda"] <= 1.0
        assert figure["human_only"] is not None
        assert figure["cube"] is not None
        interval = figure["interval"]
        assert interval["low"] <= figure["cube"] <= interval["high"]
    report = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "Checked against people" in report

    # A human file naming a question the run does not have: exit 2, one
    # message naming the file, row and field; the summary stays as it was.
    written = (run_dir / "summary.json").read_bytes()
    bad = tmp_path / "bad.csv"
    lines = human.read_text(encoding="utf-8").splitlines()
    head, row = lines[0], lines[1].split(",")
    bad.write_text(
        "\n".join([head, ",".join(["no-such-question", *row[1:]]), *lines[2:]]) + "\n",
        encoding="utf-8",
    )
    refused = cube_ray("run", config, "--out", run_dir, "--no-progress", "--human", bad)
    assert refused.returncode == 2, (refused.returncode, refused.stderr[-3000:])
    assert "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert "bad.csv" in refused.stderr
    assert "no-such-question" in refused.stderr
    assert (run_dir / "summary.json").read_bytes() == written
    assert parts(run_dir) == before
