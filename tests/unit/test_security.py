"""Secrets and exfiltration rules of run configs (CLI and config load, no Ray).

Literal credentials are refused (exit 2, nothing written, value never echoed),
``${NAME}`` reads only declared variables, code-loading switches need an
explicit opt-in, ``extra_body`` cannot override the scoring keys, and whatever
is printed of a config is masked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cube_ray.cli import main
from cube_ray.config import RunConfig
from cube_ray.credentials import MASK, mask
from cube_ray.engines.config import OpenAIHttpEngineConfig
from cube_ray.engines.openai_http._request import build_payload
from cube_ray.errors import ConfigError
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

SECRET = "sk-" + "Zq7" * 8
"""A value that must never be echoed."""


def base(tmp: Path) -> dict[str, Any]:
    corpus, ids = make_corpus(tmp, 3)
    path = fake_config(tmp, corpus, make_qa_file(tmp, ids))
    cfg: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return cfg


def http_system(**kw: Any) -> dict[str, Any]:
    return {"name": "rag@svc", "kind": "http", "url": "http://127.0.0.1:9/a", **kw}


def load(tmp: Path, cfg: dict[str, Any]) -> RunConfig:
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return RunConfig.from_yaml(path)


LITERALS: list[tuple[str, Any]] = [
    ("systems", http_system(headers={"Authorization": f"Bearer {SECRET}"})),
    ("systems", http_system(headers={"x-api-key": SECRET})),
    ("systems", http_system(headers={"api-key": SECRET})),
    ("systems", http_system(headers={"Cookie": f"session={SECRET}"})),
    ("systems", http_system(headers={"X-Auth-Token": SECRET})),
    ("systems", http_system(url=f"http://127.0.0.1:9/a?api_key={SECRET}")),
    ("systems", http_system(url=f"http://user:{SECRET}@127.0.0.1:9/a")),
    ("systems", http_system(body={"question": "{question}", "token": SECRET})),
    ("generator", {"backend": "vllm", "model": "/m", "env": {"HF_TOKEN": SECRET}}),
    ("generator", {"backend": "vllm", "model": "/m", "env": {"MY_API_KEY": SECRET}}),
    ("generator", {"backend": "vllm", "model": "/m", "env": {"DB_PASSWORD": SECRET}}),
    ("generator", {"backend": "vllm", "model": "/m", "env": {"X_SECRET": SECRET}}),
    (
        "judges",
        {
            "backend": "openai_http",
            "model": "m",
            "base_url": "http://127.0.0.1:9/v1",
            "extra_body": {"api_key": SECRET},
        },
    ),
    (
        "judges",
        {
            "backend": "openai_http",
            "model": "m",
            "base_url": f"http://127.0.0.1:9/v1?key={SECRET}",
        },
    ),
]


def _place(cfg: dict[str, Any], section: str, entry: Any) -> None:
    if section == "systems":
        cfg["systems"].append(entry)
    elif section == "generator":
        cfg["generator"] = entry
    else:
        cfg["judges"]["api"] = entry


@pytest.mark.parametrize(("section", "entry"), LITERALS)
def test_literal_credential_is_refused_exit_2_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, entry: Any
) -> None:
    cfg = base(tmp_path)
    _place(cfg, section, entry)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "out"
    code = main(["run", str(path), "--out", str(run_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("cube-ray: error: ")
    assert str(path) in err  # names the file
    assert "literal" in err
    assert "${" in err or "api_key_env" in err  # the fix
    assert SECRET not in err
    assert "Zq7" not in err
    assert not run_dir.exists()


def test_placeholders_and_empty_values_are_not_literal(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    cfg["env_vars"] = ["RAG_KEY", "HF_TOKEN"]
    cfg["systems"].append(
        http_system(
            url="http://127.0.0.1:9/a?api_key=${RAG_KEY}",
            headers={"Authorization": "Bearer ${RAG_KEY}", "X-Trace": "abc"},
        )
    )
    cfg["judges"]["v"] = {
        "backend": "vllm",
        "model": "/m",
        "env": {"HF_TOKEN": "${HF_TOKEN}", "VLLM_CPU_KVCACHE_SPACE": "1"},
    }
    config = load(tmp_path, cfg)
    uses = {(u.name, u.field, u.destination) for u in config.env_uses()}
    assert uses == {
        ("RAG_KEY", "systems[rag@svc].url", "127.0.0.1:9"),
        ("RAG_KEY", "systems[rag@svc].headers.Authorization", "127.0.0.1:9"),
        ("HF_TOKEN", "judges.v.env.HF_TOKEN", "the local vLLM engine process"),
    }


def test_undeclared_variable_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = base(tmp_path)
    cfg["systems"].append(
        http_system(
            url="https://collector.example/x",
            headers={"X-Data": "${AWS_SECRET_ACCESS_KEY}"},
        )
    )
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    run_dir = tmp_path / "out"
    code = main(["run", str(path), "--out", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert "AWS_SECRET_ACCESS_KEY" in err
    assert "collector.example" in err
    assert "env_vars" in err
    assert not run_dir.exists()
    cfg["env_vars"] = ["AWS_SECRET_ACCESS_KEY"]  # declared: accepted
    assert load(tmp_path, cfg).env_vars == ["AWS_SECRET_ACCESS_KEY"]


def test_undeclared_variable_in_url_and_engine_env(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    cfg["systems"].append(http_system(url="http://${RAG_HOST}/a"))
    with pytest.raises(
        ConfigError, match=r"systems\[rag@svc\]\.url reads \$\{RAG_HOST\}"
    ):
        load(tmp_path, cfg)
    cfg = base(tmp_path)
    cfg["generator"] = {"backend": "vllm", "model": "/m", "env": {"X": "${HOME}"}}
    with pytest.raises(ConfigError, match=r"generator\.env\.X reads \$\{HOME\}"):
        load(tmp_path, cfg)


def test_api_key_env_names_count_as_declared(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    cfg["judges"]["api"] = {
        "backend": "openai_http",
        "model": "m",
        "base_url": "https://api.example/v1",
        "api_key_env": "JUDGE_KEY",
    }
    cfg["systems"].append(http_system(headers={"Authorization": "Bearer ${JUDGE_KEY}"}))
    config = load(tmp_path, cfg)
    assert {(u.name, u.destination) for u in config.env_uses()} == {
        ("JUDGE_KEY", "api.example"),
        ("JUDGE_KEY", "127.0.0.1:9"),
    }


def test_env_vars_are_bare_names(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    cfg["env_vars"] = ["${RAG_KEY}"]
    with pytest.raises(ConfigError, match="not variable names"):
        load(tmp_path, cfg)


def test_dry_run_lists_variables_and_hosts_never_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_KEY", SECRET)
    cfg = base(tmp_path)
    cfg["env_vars"] = ["RAG_KEY"]
    cfg["systems"].append(
        http_system(
            url="https://rag.example:8443/api",
            headers={"Authorization": "Bearer ${RAG_KEY}"},
        )
    )
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    code = main(["run", str(path), "--out", str(tmp_path / "out"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "  RAG_KEY -> rag.example:8443  (systems[rag@svc].headers.Authorization)" in out
    )
    assert SECRET not in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("kwargs", "env"),
    [
        ({"trust_remote_code": True}, {}),
        ({"worker_extension_cls": "evil.module.Cls"}, {}),
        ({"logits_processors": ["evil.Proc"]}, {}),
        ({}, {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}),
        ({"scheduler_cls": "evil.sched.Scheduler"}, {}),
        ({"distributed_executor_backend": "evil.exec.Backend"}, {}),
        ({"compilation_config": {"backend": "evil.compile.fn"}}, {}),
        ({"compilation_config": '{"backend": "evil.compile.fn"}'}, {}),
        ({"a_future_hook": "evil.module.Hook"}, {}),
        ({}, {"PYTHONPATH": "/tmp/evil"}),
        ({}, {"LD_PRELOAD": "/tmp/evil.so"}),
        ({}, {"LD_LIBRARY_PATH": "/tmp/evil"}),
        ({}, {"VLLM_PLUGINS": "evil"}),
    ],
)
def test_code_loading_needs_allow_remote_code(
    tmp_path: Path, kwargs: dict[str, Any], env: dict[str, str]
) -> None:
    cfg = base(tmp_path)
    cfg["judges"]["v"] = {
        "backend": "vllm",
        "model": "/m",
        "engine_kwargs": {"max_num_seqs": 4, **kwargs},
        "env": env,
    }
    with pytest.raises(ConfigError, match="allow_remote_code: true") as info:
        load(tmp_path, cfg)
    assert "judges.v" in str(info.value)
    cfg["allow_remote_code"] = True
    assert load(tmp_path, cfg).allow_remote_code


@pytest.mark.parametrize(
    "name", ["OPENSSL_CONF", "GCONV_PATH", "PYTHONWARNINGS", "MY_SETTING"]
)
def test_engine_env_outside_the_allow_list_needs_allow_env(
    tmp_path: Path, name: str
) -> None:
    cfg = base(tmp_path)
    cfg["judges"]["v"] = {
        "backend": "vllm",
        "model": "/m",
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", name: "/tmp/x"},
    }
    with pytest.raises(ConfigError) as info:
        load(tmp_path, cfg)
    text = str(info.value)
    assert f"judges.v.env sets [{name!r}]" in text
    assert f"allow_env: [{name!r}]" in text
    cfg["allow_remote_code"] = True  # not a code-loading switch: no help
    with pytest.raises(ConfigError, match="allow_env"):
        load(tmp_path, cfg)
    del cfg["allow_remote_code"]
    cfg["allow_env"] = [name]
    assert load(tmp_path, cfg).allow_env == [name]


def test_engine_env_tuning_variables_pass() -> None:
    from cube_ray.engines.config import engine_env_allowed
    from tests.conftest import TINY_ENGINE_ENV

    tuning = [
        *TINY_ENGINE_ENV,
        "OMP_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "NCCL_DEBUG",
        "VLLM_CPU_OMP_THREADS_BIND",
        "HF_TOKEN",
    ]
    assert all(engine_env_allowed(n) for n in tuning)
    for name in ("OPENSSL_CONF", "GCONV_PATH", "PYTHONWARNINGS", "LD_PRELOAD"):
        assert not engine_env_allowed(name)


def test_allow_env_does_not_open_code_loading_names(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    env = {"LD_PRELOAD": "/tmp/evil.so", "VLLM_LOGGING_CONFIG_PATH": "/tmp/l.json"}
    cfg["judges"]["v"] = {"backend": "vllm", "model": "/m", "env": env}
    cfg["allow_env"] = ["LD_PRELOAD", "VLLM_LOGGING_CONFIG_PATH"]
    with pytest.raises(ConfigError, match="allow_remote_code: true"):
        load(tmp_path, cfg)
    cfg["allow_remote_code"] = True
    assert load(tmp_path, cfg).allow_remote_code


def test_allow_env_lists_bare_names(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    cfg["allow_env"] = ["${OPENSSL_CONF}"]
    with pytest.raises(ConfigError, match="allow_env lists"):
        load(tmp_path, cfg)


def test_trust_remote_code_false_is_fine(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    cfg["generator"] = {
        "backend": "vllm",
        "model": "/m",
        "engine_kwargs": {
            "trust_remote_code": False,
            "distributed_executor_backend": "mp",
            "compilation_config": {"level": 0},
            "max_num_seqs": 4,
        },
        "env": {"VLLM_CPU_KVCACHE_SPACE": "4"},
    }
    assert not load(tmp_path, cfg).allow_remote_code


def _outside(tmp: Path) -> Path:
    """A secret file outside the config's folder (the config is in ``tmp/cfg``)."""
    secret = tmp / "home" / ".aws" / "credentials"
    secret.parent.mkdir(parents=True)
    secret.write_text(f"aws_secret_access_key = {SECRET}\n", encoding="utf-8")
    return secret


def _config_in_subdir(tmp: Path) -> tuple[Path, dict[str, Any]]:
    folder = tmp / "cfg"
    folder.mkdir()
    return folder, base(folder)


@pytest.mark.parametrize(
    "where", ["rubric_file", "rubric_tilde", "prompt", "prompt_no_txt", "symlink"]
)
def test_files_outside_the_config_folder_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """A config cannot read (and so send to a judge) a file outside its folder:
    exit 2 naming the field, before any file is read; data_dirs or
    allow_outside_paths opt in."""
    folder, cfg = _config_in_subdir(tmp_path)
    secret = _outside(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    field = {
        "rubric_file": "dimensions[0].rubric_file",
        "rubric_tilde": "dimensions[0].rubric_file",
        "prompt": "prompts.judge",
        "prompt_no_txt": "prompts.judge",
        "symlink": "dimensions[0].rubric_file",
    }[where]
    if where == "rubric_file":
        cfg["dimensions"] = [{"name": "relevance", "rubric_file": str(secret)}]
    elif where == "rubric_tilde":
        cfg["dimensions"] = [{"name": "relevance", "rubric_file": "~/.aws/credentials"}]
    elif where == "symlink":
        (folder / "rubric.txt").symlink_to(secret)
        cfg["dimensions"] = [{"name": "relevance", "rubric_file": "rubric.txt"}]
    else:
        judge = tmp_path / "home" / "judge.txt"
        judge.write_text("$nonce $question $answer $document $rubric", "utf-8")
        cfg["prompts"] = {
            "judge": str(judge) if where == "prompt" else "../home/.aws/credentials"
        }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    code = main(["run", str(path), "--out", str(folder / "out"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"config file '{path}' is invalid" in err
    assert f"{field} is " in err
    assert "data_dirs" in err
    assert "allow_outside_paths: true" in err
    assert SECRET not in err
    assert not (folder / "out").exists()
    if where in ("prompt", "prompt_no_txt"):
        return  # the opt-ins are shown with a rubric file
    cfg["data_dirs"] = [str(secret.parent)]
    assert load(folder, cfg).dimensions[0].rubric_text() == (
        f"aws_secret_access_key = {SECRET}"
    )
    del cfg["data_dirs"]
    cfg["allow_outside_paths"] = True
    assert load(folder, cfg).allow_outside_paths


def test_shipped_configs_read_only_their_declared_folders() -> None:
    root = Path(__file__).resolve().parents[2]
    for name in ("demo.yaml", "guangdong.yaml"):
        data = yaml.safe_load((root / "conf" / name).read_text(encoding="utf-8"))
        assert data["data_dirs"], name
        assert not data.get("allow_outside_paths"), name


@pytest.mark.parametrize(
    "key",
    [
        "temperature",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "messages",
        "max_tokens",
        "guided_choice",
    ],
)
def test_extra_body_cannot_override_scoring_keys(tmp_path: Path, key: str) -> None:
    cfg = base(tmp_path)
    cfg["judges"]["api"] = {
        "backend": "openai_http",
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "extra_body": {key: 1, "chat_template_kwargs": {"enable_thinking": False}},
    }
    with pytest.raises(ConfigError, match=rf"extra_body sets \['{key}'\]"):
        load(tmp_path, cfg)


def test_engine_fields_win_over_extra_body_in_the_request() -> None:
    # Defence in depth: even a config built without validation cannot override.
    cfg = OpenAIHttpEngineConfig.model_construct(
        **{
            **OpenAIHttpEngineConfig(model="m", base_url="http://h/v1").__dict__,
            "extra_body": {"temperature": 1.5, "model": "other", "top_k": 3},
        }
    )
    payload = build_payload(cfg, "p", {"temperature": 0.0, "max_tokens": 4}, None)
    assert payload["temperature"] == 0.0
    assert payload["model"] == "m"
    assert payload["top_k"] == 3


def test_mask_hides_credentials_keeps_placeholders() -> None:
    cfg = {
        "systems": [
            {
                "headers": {"Authorization": f"Bearer {SECRET}", "X-K": "${K}"},
                "url": f"https://u:{SECRET}@h/x?token={SECRET}&q=1",
                "body": {"nested": {"password": SECRET, "n": 3}},
            }
        ],
        "env": {"HF_TOKEN": SECRET, "VLLM_CPU_KVCACHE_SPACE": "4"},
        "note": f"curl -H 'Authorization: Bearer {SECRET}'",
        "max_tokens": 12,
        "api_key_env": "OPENAI_API_KEY",
        "prompt_nonce": "0123456789abcdef",
    }
    masked = mask(cfg)
    assert SECRET not in json.dumps(masked)
    assert masked["systems"][0]["headers"] == {"Authorization": MASK, "X-K": "${K}"}
    assert masked["env"] == {"HF_TOKEN": MASK, "VLLM_CPU_KVCACHE_SPACE": "4"}
    assert masked["max_tokens"] == 12
    assert masked["api_key_env"] == "OPENAI_API_KEY"
    assert masked["prompt_nonce"] == MASK
    assert masked["systems"][0]["url"] == f"https://u:{MASK}@h/x?token={MASK}&q=1"


def test_manifest_config_keeps_placeholders(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    cfg["env_vars"] = ["RAG_KEY"]
    cfg["systems"].append(http_system(headers={"Authorization": "Bearer ${RAG_KEY}"}))
    stored = load(tmp_path, cfg).manifest_config()
    assert stored["systems"][1]["headers"] == {"Authorization": "Bearer ${RAG_KEY}"}
    assert stored["env_vars"] == ["RAG_KEY"]


def test_validation_errors_never_echo_a_credential(tmp_path: Path) -> None:
    cfg = base(tmp_path)
    cfg["systems"].append(http_system(headers={"Authorization": [SECRET]}))
    with pytest.raises(ConfigError) as info:
        load(tmp_path, cfg)
    assert "headers.Authorization" in str(info.value)
    assert SECRET not in str(info.value)


def test_template_without_nonce_fails_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_style = tmp_path / "judge_old.txt"
    old_style.write_text(
        "<document>$document</document>\n<question>$question</question>\n"
        "<answer>$answer</answer>\n$rubric\nScore (0-10):",
        encoding="utf-8",
    )
    cfg = base(tmp_path)
    cfg["prompts"] = {"judge": str(old_style)}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    run_dir = tmp_path / "out"
    for extra in ([], ["--dry-run"]):
        code = main(["run", str(path), "--out", str(run_dir), "--no-progress", *extra])
        err = capsys.readouterr().err
        assert code == 2
        assert "judge_old.txt" in err
        assert "<document-$nonce>" in err
        assert not run_dir.exists()


def test_engine_settings_env_is_not_a_credential() -> None:
    # The embedded engine's own environment (and the usual vLLM/HF settings)
    # must pass the literal-credential check.
    from cube_ray.engines.config import VllmEngineConfig
    from cube_ray.engines.embedded import CPU_ENV

    env = {**CPU_ENV, "OMP_NUM_THREADS": "2", "HF_HUB_ENABLE_HF_TRANSFER": "0"}
    assert VllmEngineConfig(model="/m", env=env).env == env
