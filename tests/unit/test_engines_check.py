"""``cube-ray engines check CONFIG`` with fake engines (the real ones: e2e tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cube_ray.cli import main


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "conf.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_check_reads_generator_judges_and_engines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _write(
        tmp_path,
        "corpus: {path: x.jsonl}\n"
        "generator: {backend: fake, name: gen}\n"
        "judges:\n"
        "  a: {backend: fake, name: ja, score_mode: expected}\n"
        "engines:\n"
        "  extra: {backend: fake, seed: 4}\n",
    )
    assert main(["engines", "check", conf, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["engine"] for r in rows] == ["generator", "judge:a", "extra"]
    assert all(r["ok"] and r["status"] == "ok" for r in rows)
    assert all(0 <= r["score"] <= 10 for r in rows)
    assert rows[1]["mode"] == "expected"


def test_check_scores_with_the_reference_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _write(tmp_path, "judges:\n  ref: {backend: reference}\n")
    assert main(["engines", "check", conf, "--json"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["backend"] == "reference"
    assert row["ok"] is True
    # The sample answer quotes the sample guide: full support.
    assert row["score"] == 10.0


def test_check_one_engine_human_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _write(tmp_path, "engines:\n  a: {backend: fake}\n  b: {backend: fake}\n")
    assert main(["engines", "check", conf, "--engine", "b", "--mode", "argmax"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok   b (fake, fake): load ")
    assert "argmax score=" in out


def test_check_reports_a_failing_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    conf = _write(
        tmp_path,
        "engines:\n"
        "  api: {backend: openai_http, base_url: 'http://127.0.0.1:9/v1',"
        " model: m, api_key_env: NO_SUCH_KEY_VAR}\n"
        "  ok: {backend: fake}\n",
    )
    assert main(["engines", "check", conf]) == 1
    out = capsys.readouterr().out
    assert "FAIL api (openai_http): " in out
    assert "NO_SUCH_KEY_VAR" in out
    assert "ok   ok (fake" in out


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("corpus: {path: x}\n", "names no engine"),
        ("engines:\n  a: {backend: nope}\n", "engine 'a' is invalid"),
        ("- 1\n", "must hold a mapping"),
    ],
)
def test_bad_configs_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, match: str
) -> None:
    assert main(["engines", "check", _write(tmp_path, text)]) == 2
    assert match in capsys.readouterr().err


def test_unknown_engine_name_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _write(tmp_path, "engines:\n  a: {backend: fake}\n")
    assert main(["engines", "check", conf, "--engine", "zz"]) == 2
    assert "no engine named ['zz']" in capsys.readouterr().err
