"""The training loop's parts, on hand-made inputs."""

import math

from grpoflow.models.prompting import Prompter
from grpoflow.trainers.sft import build_examples, collate


def test_sft_labels_cover_only_the_completion():
    from grpoflow.models.modeling import train_tokenizer

    tok = train_tokenizer(["Ann has 2 cats.\nAnswer:\n2+1=3\n#### 3"] * 20, 300)
    ((ids, labels),) = build_examples([{"prompt": "Ann has 2 cats.", "solution": "2+1=3\n#### 3"}], Prompter(tok), 128)
    n_prompt = len(tok("Ann has 2 cats.\nAnswer:\n", add_special_tokens=False)["input_ids"])
    assert labels[:n_prompt] == [-100] * n_prompt and labels[n_prompt:] == ids[n_prompt:]
    assert ids[-1] == tok.eos_token_id
    batch = collate([(ids, labels), (ids[:3], labels[:3])], tok.pad_token_id)
    assert batch["attention_mask"][1].tolist() == [1, 1, 1] + [0] * (len(ids) - 3)
    assert math.isclose(float((batch["labels"][1] == -100).sum()), len(ids))


def test_the_stage_run_is_named_after_the_shipped_model_where_no_sft_trains():
    from grpoflow.config import load_params
    from tasks.sft import run_name

    assert run_name(load_params("params/default.yaml")) is None  # SFT trains: the stage's own name
    assert run_name(load_params("params/smollm2-135m.yaml")) == "sft/SmolLM2-135M-Instruct, as shipped"
