"""The starting model of a parameter set, made concrete once by the ``base_model`` stage: a GGUF
file is converted into a plain Hugging Face folder (safetensors, tokenizer, chat template); a
local folder or a hub id is used where it is. Either way its source, licence and sha256 are
recorded, and what would fail later is checked now: a chat prompt without a chat template, LoRA
targets the model lacks, a tokenizer larger than the embedding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpoflow.config import Params
from grpoflow.io import sha256_file, sha256_paths, write_json, written_by_tools
from grpoflow.models.model_source import is_gguf, looks_local_path, resolve_file

SOURCE_FILE = "source.json"


def convert_gguf(gguf: Path, out: Path) -> tuple[Any, Any]:
    """Dequantise ``gguf`` with transformers and save it as a plain fp32 folder under ``out``.

    transformers marks a GGUF-loaded model as quantised and refuses to save it, although its
    tensors are plain fp32 after loading: dropping the marker makes it an ordinary model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return model, tokenizer


def _hub_folder(name: str) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(name, local_files_only=True))


def _folder_hash(folder: Path) -> str:
    files = [p for p in folder.iterdir() if p.is_file() and p.name != SOURCE_FILE and not written_by_tools(p.name)]
    return sha256_paths(files, root=folder)


def check_model(model: Any, tokenizer: Any, params: Params) -> None:
    """Raise ValueError naming the key when the model cannot serve this parameter set."""
    from grpoflow.models.lora import add_adapters
    from grpoflow.models.prompting import prompter_for

    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ValueError(
            f"model.name_or_path: the tokenizer has {len(tokenizer)} tokens but the model's embedding "
            f"only {rows} rows: they do not belong together"
        )
    prompter_for(model, tokenizer, params.prompt)  # PromptError: chat style without a chat template
    if params.model.lora:
        add_adapters(model, params.model.lora)  # LoraTargetError lists the layers it has


def prepare_base(params: Params, out: Path) -> dict:
    """Make the starting model concrete under ``out`` and return its record (also ``out/source.json``)."""
    from grpoflow.models.modeling import load_pretrained

    cfg = params.model
    out.mkdir(parents=True, exist_ok=True)
    name = cfg.name_or_path
    if name is None:
        record = {"kind": "tiny", "source": "built from scratch by the sft stage", "load_from": None, "sha256": None}
    elif is_gguf(name):
        path = resolve_file(name)
        model, tokenizer = convert_gguf(path, out)
        check_model(model, tokenizer, params)
        record = {
            "kind": "gguf",
            "source": name,
            "file": str(path),
            "sha256": sha256_file(path),
            "load_from": str(out),
            "converted_sha256": _folder_hash(out),
        }
    else:
        model, tokenizer = load_pretrained(name)
        check_model(model, tokenizer, params)
        folder = Path(name) if looks_local_path(name) else _hub_folder(name)
        record = {
            "kind": "local" if looks_local_path(name) else "hub",
            "source": name,
            "sha256": _folder_hash(folder),
            "load_from": name,
        }
    record["license"] = cfg.license or ("CC0-1.0" if name is None else "unspecified")
    write_json(out / SOURCE_FILE, record)
    return record


def base_model_path(base_dir: str | Path) -> str | None:
    """Where the starting model loads from (None: the tiny model, built from scratch)."""
    record = json.loads((Path(base_dir) / SOURCE_FILE).read_text())
    return record.get("load_from")
