"""The starting model: where it comes from, what is recorded, and what stops a set before training."""

from __future__ import annotations

import json

import pytest

from grpoflow.config import validate_params
from grpoflow.models.base_model import SOURCE_FILE, base_model_path, prepare_base
from grpoflow.models.lora import LoraTargetError
from grpoflow.models.model_source import gguf_problem, has_chat_template, model_unavailable, resolve_file
from grpoflow.models.modeling import build_tiny_model, save_pretrained, train_tokenizer
from grpoflow.models.prompting import PromptError
from tests.chat_model import build_chat_model


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("base") / "chat")


def test_gguf_sources_are_checked_without_loading_them(tmp_path):
    assert "does not exist" in gguf_problem(str(tmp_path / "m.gguf"))
    (tmp_path / "bad.gguf").write_bytes(b"PK\x03\x04 not a gguf")
    assert "is not a GGUF file" in model_unavailable(str(tmp_path / "bad.gguf"))
    (tmp_path / "ok.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    assert gguf_problem(str(tmp_path / "ok.gguf")) is None


def test_a_hub_model_that_is_not_cached_fails_at_once_when_no_hub_answers(tmp_path, monkeypatch):
    import socket
    import threading
    import time

    from grpoflow.models import model_source

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    silent = socket.socket()  # a port that accepts nothing: a connection to it is refused at once
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    silent.close()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    start = time.monotonic()
    problem = model_unavailable("Org/not-cached-model")
    assert time.monotonic() - start < 5
    assert problem is not None and "the hub (127.0.0.1) cannot be reached" in problem and "name_or_path" in problem
    # A name lookup that hangs is bounded by the probe's own timeout. (Released afterwards, as a lookup
    # that fails: the probe's thread must not outlive the test and fail inside another one.)
    release = threading.Event()

    def hanging_lookup(*args, **kwargs):
        release.wait(30)
        raise OSError("the name lookup gave up")

    monkeypatch.setattr(model_source.socket, "create_connection", hanging_lookup)
    start = time.monotonic()
    try:
        assert model_source.hub_unreachable(timeout_s=0.5) == "127.0.0.1" and time.monotonic() - start < 5
    finally:
        release.set()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE is set" in model_unavailable("Org/not-cached-model")


def test_package_files_are_found_through_metadata_and_missing_ones_named():
    assert resolve_file("package:hypothesis/py.typed").is_file()
    assert "not installed" in gguf_problem("package:no-such-dist/model.gguf")
    assert "has no file 'nope.gguf'" in gguf_problem("package:hypothesis/nope.gguf")


def test_a_local_folder_is_recorded_where_it_is(chat_dir, tmp_path):
    params = validate_params({"model": {"name_or_path": str(chat_dir), "license": "MIT"}, "prompt": {"style": "chat"}})
    record = prepare_base(params, tmp_path / "base")
    assert record["kind"] == "local" and record["license"] == "MIT" and len(record["sha256"]) == 64
    assert base_model_path(tmp_path / "base") == str(chat_dir)
    assert json.loads((tmp_path / "base" / SOURCE_FILE).read_text()) == record
    assert has_chat_template(str(chat_dir)) is True
    finder = chat_dir / ".DS_Store"  # a Finder window on the folder: the same model
    finder.write_bytes(b"\x00")
    try:
        assert prepare_base(params, tmp_path / "again")["sha256"] == record["sha256"]
    finally:
        finder.unlink()


def test_the_tiny_default_is_recorded_as_built_here(tmp_path):
    record = prepare_base(validate_params({}), tmp_path / "base")
    assert record["kind"] == "tiny" and base_model_path(tmp_path / "base") is None


def test_a_set_the_model_cannot_serve_stops_with_the_key(chat_dir, tmp_path):
    bad_lora = validate_params({"model": {"name_or_path": str(chat_dir), "lora": {"target_modules": ["c_attn"]}}})
    with pytest.raises(LoraTargetError, match="model.lora.target_modules"):
        prepare_base(bad_lora, tmp_path / "a")
    tok = train_tokenizer(["a b c d"] * 10, 96)
    plain_dir = save_pretrained(build_tiny_model(validate_params({}).model, tok, 0), tok, tmp_path / "plain")
    assert has_chat_template(str(plain_dir)) is False
    with pytest.raises(PromptError, match="no chat template"):
        prepare_base(
            validate_params({"model": {"name_or_path": str(plain_dir)}, "prompt": {"style": "chat"}}), tmp_path / "b"
        )
    tok.add_tokens([f"extra{i}" for i in range(500)])  # now larger than the model's embedding
    tok.save_pretrained(plain_dir)
    with pytest.raises(ValueError, match="tokenizer has .* tokens but the model's embedding only"):
        prepare_base(validate_params({"model": {"name_or_path": str(plain_dir)}}), tmp_path / "c")
