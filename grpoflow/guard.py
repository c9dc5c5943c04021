"""Untrusted input made harmless before it is used: YAML without aliases, parameter file names a
shell cannot misread, pip requirements that are only a name and a version, short echoes of bad
values, and URIs without their credentials.

Each check answers with a :class:`InputError` (a ``ValueError``) that names the input and says
what is allowed; callers add the file or field they read it from.
"""

from __future__ import annotations

import re
import reprlib
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import yaml

ECHO_LIMIT = 160  # characters of a bad value an error message repeats
_PARAMS_NAME = re.compile(r"[A-Za-z0-9._/-]+")
# Query parameters that carry a secret in the URIs of tracking servers, object stores and databases.
# Query (and fragment) keys whose values are secrets: OAuth's code and access_token among them.
_SECRET_QUERY = re.compile(r"token|secret|passw|pwd|signature|sig|credential|auth|key|session|sas|code", re.IGNORECASE)


class InputError(ValueError):
    """Input refused before use; the message says what was refused and what is allowed."""


# ---------------------------------------------------------------- short echoes


def _echo_repr() -> reprlib.Repr:
    # reprlib stops walking at these sizes: a nested bomb is never expanded to be printed.
    r = reprlib.Repr()
    r.maxlevel, r.maxdict, r.maxlist, r.maxtuple, r.maxset = 3, 6, 6, 6, 6
    r.maxstring, r.maxother, r.maxlong = ECHO_LIMIT, ECHO_LIMIT, 40
    return r


_ECHO = _echo_repr()


def short_repr(value: Any, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` of at most about ``limit`` characters, the cut marked with its size."""
    return clip(_ECHO.repr(value), limit)


def clip(text: str, limit: int = 4 * ECHO_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with its size (messages that embed input)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


# ---------------------------------------------------------------- YAML


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases (``&a``, ``*a``, ``<<: *a``): a 1 KB file
    of nested aliases expands to gigabytes, and a parameter set has no need to share nodes. It also
    refuses a key given twice in one mapping, which PyYAML resolves silently in favour of the last
    (a visible ``allow_unsandboxed: false`` undone by a later ``true``; DVC refuses such a file too)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)  # cached: the mapping's own pass reuses it
                if not isinstance(key, (str, int, float, bool)):
                    continue  # an unhashable key is PyYAML's own error below
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise InputError(
                        f"line {line}: key {short_repr(key)} is given twice in one mapping (first on line "
                        f"{seen[key]}): the later value would silently win; keep one"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            line = event.start_mark.line + 1 if event.start_mark else "?"
            kind = "alias *" if isinstance(event, yaml.AliasEvent) else "anchor &"
            raise InputError(
                f"line {line}: YAML {kind}{event.anchor} is not allowed here (anchors and aliases are refused in "
                "parameters: write the value out)"
            )
        return super().compose_node(parent, index)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)`` without anchors or aliases: :class:`InputError` naming the line of the
    first one; other YAML errors as PyYAML raises them."""
    loader = _NoAliasLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


# ---------------------------------------------------------------- parameter file names


def params_name_problem(name: str) -> str | None:
    """Why ``name`` may not name a parameter file anywhere (it reaches shell commands through
    dvc.yaml), or None: only ``[A-Za-z0-9._/-]``."""
    if not name or not _PARAMS_NAME.fullmatch(name):
        return (
            f"params file name {short_repr(name)} may contain only letters, digits and . _ / - "
            "(it is passed to shell commands by dvc.yaml)"
        )
    return None


def check_params_file(name: str, root: str | Path | None = None) -> str:
    """``name`` when it is a safe parameter file name (:func:`params_name_problem`), relative, and
    inside ``root`` (default: the working directory, the checkout) without ``..`` or a link out;
    else :class:`InputError`."""
    problem = params_name_problem(name)
    if problem:
        raise InputError(problem)
    path = PurePosixPath(name)
    if path.is_absolute():
        raise InputError(f"params file {name!r} must be a path relative to the checkout, e.g. params/default.yaml")
    if ".." in path.parts:
        raise InputError(f"params file {name!r} may not contain '..': it must lie inside the checkout")
    base = Path(root or Path.cwd()).resolve()
    if not (base / name).resolve().is_relative_to(base):
        raise InputError(f"params file {name!r} leads outside the checkout {base} (through a symbolic link)")
    return name


# ---------------------------------------------------------------- URIs


def redact_uri(uri: str) -> str:
    """``uri`` as it may be shown or logged: without user name and password
    (``https://user:secret@host`` -> ``https://host``) and without query parameters that carry a
    secret (``?token=...``, ``?code=...``), in the query or in a fragment of ``key=value`` pairs (OAuth's
    implicit flow hands out ``#access_token=...``). Anything that is not a URI is returned as it is."""
    try:
        parts = urlsplit(uri)
    except ValueError:  # e.g. a broken IPv6 host: still never show what precedes an '@'
        return re.sub(r"//[^/?#]*@", "//", uri)
    netloc = parts.netloc.rpartition("@")[2]
    query, fragment = _without_secrets(parts.query), parts.fragment
    if "=" in fragment:  # a fragment of pairs, not a page's route (MLflow's #/experiments/1)
        fragment = _without_secrets(fragment)
    if netloc == parts.netloc and query == parts.query and fragment == parts.fragment:
        return uri
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _without_secrets(pairs: str) -> str:
    """``pairs`` (``a=1&b=2``) without the pairs whose key names a secret; unchanged when it has none."""
    parsed = parse_qsl(pairs, keep_blank_values=True)
    kept = [(k, v) for k, v in parsed if not _SECRET_QUERY.search(k)]
    return pairs if len(kept) == len(parsed) else urlencode(kept)


# ---------------------------------------------------------------- pip requirements

_INSTALLERS = {"pip", "setuptools", "wheel"}  # a parameter set installs packages, never the installer
_REQUIREMENT_CHARS = re.compile(r"[A-Za-z0-9._\-\[\],=<>~!*+]+")  # a normalised name[extras] and specifiers


def check_requirement(text: str) -> str:
    """``text`` as pip may take it from a parameter set: a PEP 508 requirement with a name pinned to
    one exact version (``gguf==0.19.0``), no URL, no environment marker and
    nothing pip would read as an option; returned in its normal form. Else :class:`InputError`."""
    from packaging.requirements import InvalidRequirement, Requirement

    shown = short_repr(text)
    if not isinstance(text, str) or not text.strip() or text.lstrip().startswith("-"):
        raise InputError(f"{shown} is not a requirement (pip options are not allowed): write name==version")
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise InputError(f"{shown} is not a PEP 508 requirement ({str(exc).splitlines()[0][:120]})") from None
    if req.url:
        raise InputError(f"{shown}: a URL requirement is not allowed, only name==version from the package index")
    if req.marker is not None:
        raise InputError(f"{shown}: environment markers (after ';') are not allowed: write name==version")
    if not _pinned(req.specifier):
        raise InputError(
            f"{shown}: needs one exact version (name==1.2.3): a range lets a run install what no one chose"
        )
    if req.name.lower() in _INSTALLERS:
        raise InputError(f"{shown}: a parameter set may not replace pip's own tools ({', '.join(sorted(_INSTALLERS))})")
    normal = str(req)
    if not _REQUIREMENT_CHARS.fullmatch(normal):  # what PEP 508 lets through anyway, never a shell's or pip's syntax
        raise InputError(f"{shown}: a requirement may hold only a name, extras and version specifiers")
    return normal


def _pinned(specifier) -> bool:
    """One exact version and nothing else: ``==1.2.3`` (a local label such as ``+cpu`` allowed; no
    wildcard, no ``===``). A range, however narrow it is written (``>0,<999999``, ``~=0.0``, ``>=1,<2``),
    names every version the index holds or will hold inside it: a run would install whatever is newest
    there, and two runs of one set could differ. The same rule as a lock file's, and the pip
    requirement this project's own pyproject.toml writes for each runtime dependency."""
    (spec, *others) = list(specifier) or [None]
    return spec is not None and not others and spec.operator == "==" and "*" not in spec.version


_USERINFO_IN_TEXT = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#]*@")
_SECRET_QUERY_IN_TEXT = re.compile(
    r"([?&#][^=&\s#]*(?:" + _SECRET_QUERY.pattern + r")[^=&\s#]*=)[^&\s#]*", re.IGNORECASE
)


def redact_text(text: str) -> str:
    """``text`` (a log line) with the credentials of every URI in it removed, as :func:`redact_uri`
    does (a library that prints its server's address, e.g. MLflow's "View run at", leaks no password);
    a secret query value becomes ``REDACTED``."""
    if "://" not in text:
        return text
    return _SECRET_QUERY_IN_TEXT.sub(r"\1REDACTED", _USERINFO_IN_TEXT.sub(r"\1", text))
