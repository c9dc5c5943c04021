"""One rendering of prompts for every path, and the tokens a completion stops at."""

from __future__ import annotations

import pytest
import torch

from grpoflow.config import PromptConfig
from grpoflow.models.modeling import load_pretrained, train_tokenizer
from grpoflow.models.prompting import PLAIN_TEMPLATE, Prompter, PromptError, prompter_for
from grpoflow.rollout import completion_mask
from tests.chat_model import IM_END, build_chat_model

CHAT = PromptConfig(style="chat", system="Answer with #### <number>.")


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    model, tok = load_pretrained(build_chat_model(tmp_path_factory.mktemp("chat") / "model"))
    return model, tok


def test_plain_prompts_are_the_tiny_defaults_template():
    tok = train_tokenizer(["Ann has 2 cats.\nAnswer:\n#### 2"] * 10, 128)
    p = Prompter(tok)
    assert p.prompt(" Ann has 2 cats. ") == PLAIN_TEMPLATE.format(question="Ann has 2 cats.")
    assert p.stop_ids == [tok.eos_token_id] and p.target_ids("#### 2")[-1] == tok.eos_token_id
    with_instruction = Prompter(tok, PromptConfig(instruction="Be brief."))
    assert with_instruction.prompt("Q?") == "Q?\nBe brief.\nAnswer:\n"


def test_chat_prompts_render_the_template_and_stop_at_the_end_of_turn(chat):
    model, tok = chat
    p = prompter_for(model, tok, CHAT)
    text = p.prompt("How many?")
    assert (
        text == "<|im_start|>system\nAnswer with #### <number>.<|im_end|>\n<|im_start|>user\nHow many?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    im_end = tok.convert_tokens_to_ids(IM_END)
    assert p.stop_ids[0] == im_end and tok.eos_token_id in p.stop_ids
    # The same ids whichever way a path asks for them: tokenizing the text (HF and vLLM rollouts,
    # evaluation, preflight), the chat template itself, and the prompt part of an SFT example.
    ids = p.prompt_ids("How many?")
    templated = tok.apply_chat_template(p._messages("How many?"), add_generation_prompt=True, tokenize=True)
    templated = templated["input_ids"] if hasattr(templated, "keys") else templated
    assert ids == list(templated)
    from grpoflow.trainers.sft import build_examples

    ((example, labels),) = build_examples([{"prompt": "How many?", "solution": "2+2=4\n#### 4"}], p, 256)
    assert example[: len(ids)] == ids and labels[-1] == im_end and example[-1] == im_end


def test_chat_style_without_a_template_is_a_clear_error():
    tok = train_tokenizer(["a b c"] * 10, 96)
    with pytest.raises(PromptError, match="prompt.style is 'chat' but the tokenizer has no chat template"):
        Prompter(tok, CHAT)


def test_a_completion_ends_at_the_first_of_any_stop_token_even_when_pad_is_eos():
    ids = torch.tensor([[5, 6, 2, 9, 2], [5, 7, 7, 7, 7], [3, 0, 9, 9, 9]])
    mask, truncated = completion_mask(ids, [2, 3])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]  # truncated means the cap was hit, not "no EOS id"


def test_hf_rollouts_stop_at_the_end_of_turn(chat):
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.hf import HFRolloutEngine

    model, tok = chat
    p = prompter_for(model, tok, CHAT)
    im_end = tok.convert_tokens_to_ids(IM_END)
    with torch.no_grad():  # an output layer (untied from the embeddings) whose greedy first token is <|im_end|>
        ids = torch.tensor([p.prompt_ids("Q?")])
        last = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
        head = torch.zeros_like(model.lm_head.weight)
        head[im_end] = 10 * last
        model.lm_head.weight = torch.nn.Parameter(head)
    ro = HFRolloutEngine(model, tok, stop_ids=p.stop_ids).generate([p.prompt("Q?")], 2, Sampling(0.0, 1.0, 8), 0)
    assert ro.completion_ids[0, 0].item() == im_end and ro.completion_mask[0].tolist() == [1] + [0] * 7
    assert not ro.truncated.any()
