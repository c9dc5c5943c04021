"""A file shipped inside an installed Python package, named ``package:<distribution>/<file>``:
a model source (a GGUF file in a wheel) and a data source (a JSONL file) are both named so.

Its own module, below :mod:`grpoflow.models` and :mod:`grpoflow.data`, which both read such names:
the data layer imports nothing of the models'."""

from __future__ import annotations

from pathlib import Path

PACKAGE_PREFIX = "package:"


def resolve_file(name: str) -> Path:
    """The file ``name`` names: a path, or ``package:<distribution>/<file>`` inside an installed
    package (found through its metadata, without importing it: a wheel installed with --no-deps
    may not import)."""
    if not name.startswith(PACKAGE_PREFIX):
        return Path(name).expanduser()
    from importlib import metadata

    dist_name, _, file_name = name[len(PACKAGE_PREFIX) :].partition("/")
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"package {dist_name!r} is not installed: list it in model.packages (make installs it), or "
            f"pip install --no-deps {dist_name}"
        ) from None
    for entry in dist.files or []:
        if Path(str(entry)).name == file_name:
            return Path(str(dist.locate_file(entry)))
    raise FileNotFoundError(f"package {dist_name!r} has no file {file_name!r}")
