"""The documented config mistakes fail in ``--dry-run`` and at ``run`` start,
before Ray or any engine starts: exit 2, one message naming file and field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cube_ray.cli import main
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file


def _k0(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["aggregate"] = {"k": 0}
    return "aggregate.k is 0; it must be >= 1"


def _unknown_weight(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["aggregate"] = {"weights": {"relevance": 1, "relevence": 1}}
    return "aggregate.weights.relevence: 'relevence' is not a dimension"


def _expected_without_logprobs(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["judges"]["j2"] = {
        "backend": "openai_http",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "score_mode": "expected",
    }
    return "judges.j2.score_mode is 'expected' but judges.j2.logprobs is false"


def _missing_template(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["prompts"] = {"judge": str(tmp / "judge_zh.txt")}
    return f"prompts.judge: prompt template file '{tmp / 'judge_zh.txt'}'"


def _missing_rubric(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["dimensions"] = [{"name": "relevance"}, {"name": "tone"}]
    return "dimensions[1].rubric: dimension 'tone' has no rubric"


def _weight_with_pearson(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["dimensions"] = [{"name": "relevance", "weight": 2}, {"name": "quality"}]
    cfg["aggregate"] = {"weights": "pearson"}
    return (
        "dimensions[0].weight is 2.0 but aggregate.weights is 'pearson', which "
        "ignores it"
    )


def _rubric_outside(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["dimensions"] = [{"name": "relevance", "rubric_file": "~/.aws/credentials"}]
    return "dimensions[0].rubric_file is '"


def _code_loading_env(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["judges"]["v"] = {"backend": "vllm", "model": "/m", "env": {"LD_PRELOAD": "x"}}
    return "judges.v sets ['env.LD_PRELOAD']"


def _env_outside_allow_list(cfg: dict[str, Any], tmp: Path) -> str:
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "OPENSSL_CONF": "/tmp/evil.cnf"}
    cfg["judges"]["v"] = {"backend": "vllm", "model": "/m", "env": env}
    return "judges.v.env sets ['OPENSSL_CONF']"


def _file_base_url(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["judges"]["h"] = {
        "backend": "openai_http",
        "base_url": "file:///etc/passwd#x",
        "model": "m",
    }
    return "base_url must be an http:// or https:// URL with a host"


MISTAKES: dict[str, Callable[[dict[str, Any], Path], str]] = {
    "k0": _k0,
    "unknown_weight": _unknown_weight,
    "expected_without_logprobs": _expected_without_logprobs,
    "missing_template": _missing_template,
    "missing_rubric": _missing_rubric,
    "weight_with_pearson": _weight_with_pearson,
    "rubric_outside": _rubric_outside,
    "code_loading_env": _code_loading_env,
    "env_outside_allow_list": _env_outside_allow_list,
    "file_base_url": _file_base_url,
}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_mistake_fails_before_any_work(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mistake: str,
    dry_run: bool,
) -> None:
    corpus, ids = make_corpus(tmp_path, 4)
    qa = make_qa_file(tmp_path, ids)
    path = fake_config(tmp_path, corpus, qa)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    expected = MISTAKES[mistake](cfg, tmp_path)
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    calls = tmp_path / "calls.log"
    argv = ["run", str(path), "--out", str(run_dir), "--call-log", str(calls)]
    code = main([*argv, "--dry-run"] if dry_run else argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"cube-ray: error: config file '{path}' is invalid")
    assert expected in err
    assert "Traceback" not in err
    assert not run_dir.exists()
    assert not calls.exists()


# --- mistakes in the files and paths a run reads (not the config's own keys) ---


def _write(cfg: dict[str, Any], tmp: Path) -> Path:
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def _field_typo(cfg: dict[str, Any], tmp: Path) -> list[str]:
    cfg["corpus"]["fields"][1] = {"DEPT_NAM": "实施机构"}
    return [
        f"file {tmp / 'corpus.jsonl'}, field 'DEPT_NAM': corpus.fields names "
        "'DEPT_NAM', but no record has that column (did you mean 'DEPT_NAME'?)",
        "fix the name in corpus.fields",
    ]


def _title_typo(cfg: dict[str, Any], tmp: Path) -> list[str]:
    cfg["corpus"]["title_field"] = "TASK_NAM"
    return ["corpus.title_field names 'TASK_NAM'", "did you mean 'TASK_NAME'?"]


def _broken_corpus_line(cfg: dict[str, Any], tmp: Path) -> list[str]:
    corpus = tmp / "corpus.jsonl"
    lines = corpus.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2][:-5]  # cut off the closing of the third record
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [f"file {corpus}, line 3: not valid JSON (", "one JSON object per line"]


def _broken_qa_line(cfg: dict[str, Any], tmp: Path) -> list[str]:
    qa = tmp / "qa.jsonl"
    lines = qa.read_text(encoding="utf-8").splitlines()
    lines.insert(1, "")  # a blank line: the numbers are the file's own lines
    lines[2] = lines[2].replace('"answer"', "answer")
    qa.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [f"file {qa}, line 3: QA file", "not valid JSON"]


def _latin1_config(cfg: dict[str, Any], tmp: Path) -> list[str]:
    cfg["corpus"]["fields"] = [{"TASK_NAME": "Intitulé"}, "DEPT_NAME"]
    path = tmp / "run.yaml"
    path.write_bytes(yaml.safe_dump(cfg, allow_unicode=True).encode("latin-1"))
    return [f"config file '{path}' is not UTF-8: byte 0xe9 at line", "iconv -f latin1"]


def _out_is_file(cfg: dict[str, Any], tmp: Path) -> list[str]:
    (tmp / "run").write_text("not a folder", encoding="utf-8")
    return [f"--out '{tmp / 'run'}' is a file; a run dir is a folder"]


def _unset_variable(cfg: dict[str, Any], tmp: Path) -> list[str]:
    cfg["systems"].append(
        {
            "name": "rag@svc",
            "kind": "http",
            "url": "http://127.0.0.1:9/api",
            "headers": {"Authorization": "Bearer ${CUBE_TEST_UNSET_KEY}"},
        }
    )
    cfg["env_vars"] = ["CUBE_TEST_UNSET_KEY"]
    return [
        "systems[rag@svc].headers.Authorization names CUBE_TEST_UNSET_KEY, which "
        "is not set",
        "export them",
    ]


def _missing_qa_file(cfg: dict[str, Any], tmp: Path) -> list[str]:
    (tmp / "qa.jsonl").unlink()
    return [str(tmp / "qa.jsonl")]


def _missing_question_file(cfg: dict[str, Any], tmp: Path) -> list[str]:
    cfg["questions"] = {"source": "file", "path": str(tmp / "questions.jsonl")}
    return [f"file {tmp / 'questions.jsonl'}", "not found"]


def _another_runs_dir(cfg: dict[str, Any], tmp: Path) -> list[str]:
    from cube_ray.config import RunConfig
    from cube_ray.corpus import with_prompt_language

    other = yaml.safe_load(yaml.safe_dump(cfg))
    other["judges"]["j1"]["seed"] = 99
    config = with_prompt_language(RunConfig.from_yaml(_write(other, tmp)))
    (tmp / "run").mkdir()
    (tmp / "run" / "manifest.json").write_text(
        json.dumps(
            {
                "status": "complete",
                "config": config.manifest_config(),
                "config_hash": config.fingerprint(),
            }
        ),
        encoding="utf-8",
    )
    return [
        f"run dir '{tmp / 'run'}' belongs to another run: its manifest has config "
        f"fingerprint {config.fingerprint()}, this config has ",
        "judges.j1.seed (99 -> 1)",
        "choose another --out",
    ]


INPUT_MISTAKES: dict[str, Callable[[dict[str, Any], Path], list[str]]] = {
    "field_typo": _field_typo,
    "title_typo": _title_typo,
    "broken_corpus_line": _broken_corpus_line,
    "broken_qa_line": _broken_qa_line,
    "latin1_config": _latin1_config,
    "out_is_file": _out_is_file,
    "unset_variable": _unset_variable,
    "missing_qa_file": _missing_qa_file,
    "missing_question_file": _missing_question_file,
    "another_runs_dir": _another_runs_dir,
}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("mistake", sorted(INPUT_MISTAKES))
def test_input_mistake_is_one_message_before_any_work(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mistake: str,
    dry_run: bool,
) -> None:
    """Each mistake: exit 2, one message naming the file (and 1-based line) or
    field and the fix, nothing written, no engine or Ray started."""
    monkeypatch.delenv("CUBE_TEST_UNSET_KEY", raising=False)
    corpus, ids = make_corpus(tmp_path, 4)
    qa = make_qa_file(tmp_path, ids)
    path = fake_config(tmp_path, corpus, qa)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    if mistake != "latin1_config":
        _write(cfg, tmp_path)
    expected = INPUT_MISTAKES[mistake](cfg, tmp_path)
    if mistake != "latin1_config":
        _write(cfg, tmp_path)
    run_dir = tmp_path / "run"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    calls = tmp_path / "calls.log"
    argv = ["run", str(path), "--out", str(run_dir), "--call-log", str(calls)]
    code = main([*argv, "--dry-run"] if dry_run else argv)
    err = capsys.readouterr().err
    assert code == 2, err
    if mistake == "broken_qa_line" and not dry_run:
        # A run reads a QA file's rows in a Ray task on the driver's node (the
        # driver holds none), so Ray has started and may have spoken first; no
        # engine has (no call log below), and no row beyond the documents
        # was written.
        err = err[err.index("cube-ray: error: ") :]
        assert not (run_dir / "questions").exists()
        assert not (run_dir / "answers").exists()
    else:
        assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert err.startswith("cube-ray: error: ")
    for text in expected:
        assert text in err
    assert "Traceback" not in err
    assert not calls.exists()


def test_a_json_array_corpus_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    records = [json.loads(x) for x in corpus.read_text(encoding="utf-8").splitlines()]
    array = tmp_path / "corpus.json"
    array.write_text(json.dumps(records, ensure_ascii=False, indent=1), "utf-8")
    path = fake_config(tmp_path, array, make_qa_file(tmp_path, ids))
    code = main(["run", str(path), "--out", str(tmp_path / "run"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "questions" in out
    assert f"  {array}  (corpus.path) -> fake engine (local)" in out


def test_dry_run_lists_every_file_read_and_where_it_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    qa = make_qa_file(tmp_path, ids)
    path = fake_config(tmp_path, corpus, qa)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    (tmp_path / "tone.txt").write_text("Rubric: tone.", encoding="utf-8")
    cfg["dimensions"] = [
        {"name": "relevance"},
        {"name": "tone", "rubric_file": "tone.txt"},
    ]
    cfg["judges"]["remote"] = {
        "backend": "openai_http",
        "base_url": "https://judge.example:8443/v1",
        "model": "m",
    }
    _write(cfg, tmp_path)
    code = main(["run", str(path), "--out", str(tmp_path / "run"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    listed = out.split("Files read, and where their content goes:\n", 1)[1]
    judges = "fake engine (local), judge.example:8443 (HTTP engine)"
    assert f"  {corpus}  (corpus.path) -> fake engine (local), judge.example" in listed
    assert f"  {qa}  (systems[0].path) -> {judges}" in listed
    assert f"  {tmp_path / 'tone.txt'}  (dimensions[1].rubric_file) -> {judges}" in (
        listed
    )


def test_dry_run_into_head_has_no_broken_pipe(tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    command = (
        f"{sys.executable} -m cube_ray.cli run {path} --out {tmp_path / 'run'} "
        "--dry-run | head -1"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.stdout.startswith("stage")
    assert "Traceback" not in done.stderr
    assert "BrokenPipe" not in done.stderr


def test_aggregate_and_report_path_mistakes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    a_file = tmp_path / "summary.json"
    a_file.write_text("{}", encoding="utf-8")
    cases = [
        (
            ["aggregate", str(a_file)],
            f"RUN_DIR '{a_file}' is a file; aggregate wants a run directory "
            "(holding answers/ and scores/), or the tables as --answers PATH "
            "--scores PATH",
        ),
        (
            ["aggregate", str(run_dir), "--out", str(tmp_path)],
            f"--out '{tmp_path}' is a folder; --out is the summary file to write",
        ),
        (
            ["report", str(run_dir), "--out-dir", str(a_file)],
            f"--out-dir '{a_file}': '{a_file}' is a file",
        ),
        (
            ["report", str(a_file)],
            f"RUN_DIR '{a_file}' is a file; report wants a run directory",
        ),
    ]
    for argv, expected in cases:
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, argv
        assert err.startswith(f"cube-ray: error: {expected}"), err
        assert "Traceback" not in err
    assert a_file.read_text(encoding="utf-8") == "{}"


def _serve_rag(ids: list[str]) -> Any:
    """A RAG service on 127.0.0.1 answering ``{answer, data: {docs: [{id}]}}``."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            question = json.loads(self.rfile.read(length))["question"]
            body = json.dumps(
                {
                    "answer": f"About {question}: see the documents.",
                    "data": {"docs": [{"id": i} for i in ids]},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("case", ["wrong_retrieved_path", "foreign_ids"])
def test_check_asks_each_http_system_one_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """`cube-ray check` fails (exit 2) before the preflight when an HTTP system's
    reply holds no retrieved id or none of the corpus, showing what it got."""
    corpus, ids = make_corpus(tmp_path, 3)
    served = ids[:2] if case == "wrong_retrieved_path" else ["doc-17", "doc-4"]
    server = _serve_rag(served)
    try:
        path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        url = f"http://127.0.0.1:{server.server_address[1]}/ask"
        cfg["systems"] = [
            {
                "name": "rag@svc",
                "kind": "http",
                "url": url,
                "retrieved_path": (
                    "docs[].id" if case == "wrong_retrieved_path" else "data.docs[].id"
                ),
                "max_retries": 0,
            }
        ]
        _write(cfg, tmp_path)
        code = main(["check", str(path), "--out", str(tmp_path / "run")])
        captured = capsys.readouterr()
        assert code == 2
        err = captured.err
        assert err.startswith("cube-ray: error: field 'systems[rag@svc]': system ")
        assert "answer 'About " in err
        assert (
            f"retrieved ids {[] if case == 'wrong_retrieved_path' else served}" in err
        )
        if case == "wrong_retrieved_path":
            assert "no retrieved ids at retrieved_path" in err
        else:
            assert "none of the retrieved ids is a document id of the corpus" in err
        assert "preflight" not in captured.out
        # The same system, rightly configured, passes the probe.
        from cube_ray.commands.check import probe_systems
        from cube_ray.config import RunConfig

        if case == "wrong_retrieved_path":
            cfg["systems"][0]["retrieved_path"] = "data.docs[].id"
            said: list[str] = []
            probe_systems(RunConfig.from_yaml(_write(cfg, tmp_path)), say=said.append)
            assert len(said) == 2  # two questions, each shown with its answer
            for line in said:
                assert line.startswith("rag@svc: asked ")
                assert "; answer 'About " in line
                assert line.endswith("; 2 of 2 retrieved ids are corpus ids")
    finally:
        server.shutdown()


def test_allow_env_lets_a_named_engine_variable_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``allow_env: [NAME]`` through ``cube-ray run``: the variable the
    allow-list refuses (``env_outside_allow_list`` above) is accepted once the
    config names it, and only that one."""
    corpus, ids = make_corpus(tmp_path, 4)
    qa = make_qa_file(tmp_path, ids)
    path = fake_config(tmp_path, corpus, qa)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    _env_outside_allow_list(cfg, tmp_path)
    argv = ["run", str(path), "--out", str(tmp_path / "run"), "--dry-run"]
    for allowed, code in ((["GCONV_PATH"], 2), (["OPENSSL_CONF"], 0)):
        cfg["allow_env"] = allowed
        path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
        assert main(argv) == code, allowed
        err = capsys.readouterr().err
        assert ("OPENSSL_CONF" in err) == (code == 2), err
