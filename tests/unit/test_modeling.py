import pytest
import torch

from grpoflow.config import ModelConfig
from grpoflow.models.modeling import (
    build_tiny_model,
    count_parameters,
    load_pretrained,
    save_pretrained,
    train_tokenizer,
)

TEXTS = [f"Ava has {i} apples. She gets {i * 3} more.\n{i}+{i * 3}={i * 4}\n#### {i * 4}" for i in range(200)]
CFG = ModelConfig(vocab_size=300, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_length=64)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, CFG.vocab_size)


def test_digits_are_single_tokens(tokenizer):
    pieces = tokenizer.tokenize("1234 + 56")
    digits = [p.lstrip("Ġ") for p in pieces if p.lstrip("Ġ").isdigit()]
    assert digits == list("123456")


def test_tokenizer_round_trips_text(tokenizer):
    text = "Ava has 12 apples.\n12+3=15\n#### 15"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_tiny_model_is_seeded_and_small(tokenizer):
    a, b = build_tiny_model(CFG, tokenizer, seed=1), build_tiny_model(CFG, tokenizer, seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert count_parameters(a) < 500_000
    assert a.config.hidden_size // a.config.num_attention_heads == 32  # vLLM's CPU kernels need >= 32


def test_save_and_reload_give_identical_logits(tokenizer, tmp_path):
    model = build_tiny_model(CFG, tokenizer, seed=0).eval()
    save_pretrained(model, tokenizer, tmp_path / "ckpt")
    loaded, tok = load_pretrained(tmp_path / "ckpt")
    ids = tok("Ava has 3 apples.", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded.eval()(ids).logits, atol=1e-6)
    assert tok.pad_token == "<|pad|>" and tok.padding_side == "left"


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_pretrained(tmp_path / "no-such-model")


def test_unknown_hub_name_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE"):
        load_pretrained("grpoflow-test/definitely-not-cached")
