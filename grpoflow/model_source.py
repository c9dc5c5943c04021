"""Where a model comes from (a local directory or a hub name) and whether it can be found,
answered without importing torch or transformers: the flow asks before any stage starts."""

from __future__ import annotations

import os
from pathlib import Path


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` as the environment says now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def looks_local_path(name: str) -> bool:
    """Whether ``name`` means a local path rather than a hub id."""
    local = Path(name)
    return local.is_absolute() or name.startswith((".", "~")) or local.exists() or name.count("/") > 1


def model_unavailable(name_or_path: str | Path) -> str | None:
    """Why loading this model would fail to find it, or None, without loading or downloading."""
    name = str(name_or_path)
    if looks_local_path(name):
        return None if Path(name).is_dir() else f"model path {name!r} does not exist (or is not a directory)"
    if hub_offline():
        from huggingface_hub import try_to_load_from_cache

        home = os.environ.get("HF_HOME")
        cache = os.environ.get("HF_HUB_CACHE") or (str(Path(home) / "hub") if home else None)
        if not isinstance(try_to_load_from_cache(name, "config.json", cache_dir=cache), str):
            return (
                f"model {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
                "download it where a hub is reachable, or point name_or_path at a local directory"
            )
    return None
