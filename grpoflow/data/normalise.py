"""One raw row validated and normalised to a :class:`Record` (gsm8k, math, code) or a
:class:`PairRecord` (pairs); what makes a row invalid is a :class:`RowError` naming why.

The input forms are described in :mod:`grpoflow.data.ingest`.
"""

from __future__ import annotations

import ast
import decimal
import keyword
import re
import warnings
from typing import Any

from grpoflow.config import DataConfig
from grpoflow.data.raw import RowError
from grpoflow.data.records import PairRecord, Record
from grpoflow.data.text import fold, hidden_characters
from verifiers.extract import last_boxed

FIELDS = {"gsm8k": ("question", "answer"), "math": ("problem", "solution")}
RECORD_FORMATS = ("gsm8k", "math", "code")  # what ingest() makes Records of; "pairs" is ingest_pairs()
# A code row's fields: our name first, then MBPP's.
CODE_FIELDS = {"prompt": ("prompt", "text"), "tests": ("tests", "test_list"), "solution": ("solution", "code")}
DEFAULT_MAX_PROMPT_CHARS: int = DataConfig.model_fields["max_prompt_chars"].default
MAX_ID_CHARS = 200
_NUMBER = re.compile(r"^-?\d+(?:,\d{3})*(?:\.\d+)?$|^-?\d*\.\d+$")
# Unicode category Cc (C0, DEL, C1) except tab and newline, and lone surrogates (UTF-8 cannot encode them).
_BAD_CHAR = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def excerpt(text: str, limit: int = 60) -> str:
    """``text`` quoted for an error message, cut at ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _plain_number(text: str) -> str | None:
    """``text`` when it is one plain number (``361``, ``1,234``, ``-3.5``, ``$18``), commas and
    currency removed; None for anything else."""
    number = text.replace("$", "").strip()
    return number.replace(",", "") if _NUMBER.match(number) else None


def gsm8k_final_answer(answer: str) -> str:
    """The number after ``####`` on the last line, commas removed; raises :class:`RowError`.

    Linear in the answer's length: a plain ``find`` and ``strip`` instead of a backtracking regex
    (``####\\s*(.+?)\\s*$`` took seconds on ``"#### x" + 20000 spaces + "y"``).
    """
    last = next((line for line in reversed(answer.splitlines()) if line.strip()), "")
    hashes = last.find("####")
    value = last[hashes + 4 :].strip() if hashes >= 0 else ""
    if not value:
        raise RowError("unparseable_answer", "no '#### <number>' final line")
    number = _plain_number(value)
    if number is None:
        raise RowError("unparseable_answer", f"final answer {excerpt(value)} is not a number")
    return number


def final_answer(text: str, field: str, *, boxed_first: bool = False) -> tuple[str, str]:
    """:func:`read_final_answer`, whose error also names the characters a reader cannot see on the field's
    last line, where its answer is (``'168\u200b'`` shows as ``168``, and "not a plain number" would read as
    wrong without it); a no-break space in a worked solution's reasoning is not the answer's fault."""
    try:
        return read_final_answer(text, field, boxed_first=boxed_first)
    except RowError as err:
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "")  # where every form's answer is
        if not (hidden := hidden_characters(last)):
            raise
        detail = f"{err.reason.partition(': ')[2]} (it holds {hidden}, which a reader cannot see)"
        raise RowError("unparseable_answer", detail) from None


def read_final_answer(text: str, field: str, *, boxed_first: bool = False) -> tuple[str, str]:
    """The reference answer in an answer field, and the solution to keep: ``(answer, solution)``.

    Three forms are understood: the whole field one plain number (``361``, ``1,234``, ``-3.5``;
    its solution becomes ``#### <n>``, or ``\\boxed{<n>}`` for math: a final line the format
    reward accepts and SFT teaches), a
    ``#### <number>`` last line (GSM8K) and a ``\\boxed{...}`` (MATH; the last one counts). A field
    with both a ``####`` line and a box is read by the form its source's format names first
    (``boxed_first`` for math). Anything else is :class:`RowError` ``unparseable_answer`` naming
    ``field``.
    """
    plain = _plain_number(text)
    if plain is not None:
        return plain, (f"\\boxed{{{plain}}}" if boxed_first else f"#### {plain}")
    boxed = last_boxed(text)
    if boxed and boxed_first:
        return boxed, text
    if "####" in text:
        try:
            return gsm8k_final_answer(text), text
        except RowError as err:
            if not boxed:
                raise RowError("unparseable_answer", f"{field}: {err.reason.partition(': ')[2]}") from None
    if boxed:
        return boxed, text
    raise RowError(
        "unparseable_answer", f"{field}: not a plain number, and no '#### <number>' final line or \\boxed{{...}}"
    )


def _check_characters(name: str, value: str) -> None:
    bad = _BAD_CHAR.search(value)
    if bad is None:
        return
    char, at = bad.group(), bad.start() + 1
    if "\ud800" <= char <= "\udfff":
        raise RowError("invalid_unicode", f"{name} has a lone surrogate U+{ord(char):04X} at character {at}")
    detail = f"{name} has U+{ord(char):04X} at character {at} (only tab and newline allowed)"
    raise RowError("control_character", detail)


def _near_misses(raw: dict[str, Any], name: str) -> str:
    """The row's keys that read as ``name`` on screen but are not it (another case, an invisible or
    look-alike character), as the missing-field error's hint; "" when there are none."""
    keys = [k for k in raw if isinstance(k, str) and k != name and fold(k).strip().casefold() == name.casefold()]
    hints = [f"{ascii(k)}" + (f" ({hidden})" if (hidden := hidden_characters(k)) else "") for k in keys]
    return f" (the row has {' and '.join(hints)}: a field's name must match exactly)" if hints else ""


def _string(raw: dict[str, Any], name: str) -> str:
    if raw.get(name) is None:
        raise RowError("missing_field", name + _near_misses(raw, name))
    value = raw[name]
    if not isinstance(value, str):
        raise RowError("wrong_type", f"{name} is {type(value).__name__}, expected str")
    return value


def _check_visible(name: str, value: str) -> None:
    """:class:`RowError` ``empty_field`` for a value of zero-width spaces and the like: empty on screen,
    so empty, whatever ``str.strip`` keeps of it."""
    if not fold(value).strip():
        raise RowError("empty_field", f"{name} holds only characters a reader cannot see ({hidden_characters(value)})")


def _text_field(raw: dict[str, Any], name: str, max_chars: int | None = None) -> str:
    written = _string(raw, name)
    value = written.strip()
    if not value:
        raise RowError("empty_field", name)
    if max_chars is not None and len(value) > max_chars:
        detail = f"{name} has {len(value)} characters, above data.max_prompt_chars={max_chars}"
        raise RowError("prompt_too_long", detail)
    _check_visible(name, written)
    _check_characters(name, value)
    return value


def _answer_text(raw: dict[str, Any], name: str) -> str:
    """The answer field as text: a string as written, or a number (int, float or decimal, as a parquet or JSON
    column of answers holds them) written out plainly, ``18.0`` as ``18``; a bool, NaN or infinity is refused."""
    value = raw.get(name)
    if isinstance(value, bool) or (value is not None and not isinstance(value, str | int | float | decimal.Decimal)):
        raise RowError("wrong_type", f"{name} is {type(value).__name__}, expected a number or text")
    if not isinstance(value, int | float | decimal.Decimal):
        return _text_field(raw, name)
    number = decimal.Decimal(value) if isinstance(value, int) else decimal.Decimal(str(value))
    if not number.is_finite():
        raise RowError("not_a_number", f"{name} is {value}, expected a finite number")
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


def _verbatim_field(raw: dict[str, Any], name: str) -> str:
    """A field of program or completion text: kept as written, since its indentation matters."""
    value = _string(raw, name)
    if not value.strip():
        raise RowError("empty_field", name)
    _check_visible(name, value)
    _check_characters(name, value)
    return value


def _present(raw: dict[str, Any], names: tuple[str, ...]) -> str:
    """The first of ``names`` the row has a value for; the first name when it has none (for the error)."""
    return next((name for name in names if raw.get(name) is not None), names[0])


def _row_id(raw: dict[str, Any], default: str, field: str = "id") -> str:
    rid = raw.get(field)
    if rid is None or (isinstance(rid, str) and not rid):
        return default
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise RowError("invalid_id", f"{field} is {type(rid).__name__}, expected str or int")
    text = str(rid)
    if len(text) > MAX_ID_CHARS:
        raise RowError("invalid_id", f"{field} has {len(text)} characters, at most {MAX_ID_CHARS}")
    try:
        _check_characters("id", text)
    except RowError as err:
        raise RowError("invalid_id", err.reason) from None
    return text


def _parse_python(name: str, source: str, kind: str) -> ast.Module:
    """``source`` parsed (never run), or :class:`RowError` ``kind`` naming the field and the line."""
    try:
        with warnings.catch_warnings():  # e.g. an invalid escape in a test string: not the row's error
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except SyntaxError as exc:
        raise RowError(kind, f"{name}: {exc.msg} on line {exc.lineno}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; nesting the parser cannot hold
        raise RowError(kind, f"{name}: {type(exc).__name__}: {exc}") from None


def _test_setup(raw: dict[str, Any]) -> str:
    """MBPP's lines the asserts need (``test_imports``, a list; ``test_setup_code``, text), or ""."""
    imports = raw.get("test_imports") or []
    if not isinstance(imports, list) or not all(isinstance(line, str) for line in imports):
        raise RowError("wrong_type", "test_imports must be a list of str")
    setup = raw.get("test_setup_code") or ""
    if not isinstance(setup, str):
        raise RowError("wrong_type", f"test_setup_code is {type(setup).__name__}, expected str")
    return "\n".join(line for line in [*imports, setup] if line.strip())


def _mbpp_tests(raw: dict[str, Any]) -> tuple[str, ...]:
    """The MBPP form's asserts: a non-empty list of str, each parsing as Python."""
    name = _present(raw, CODE_FIELDS["tests"])
    tests = raw.get(name)
    if tests is None:
        raise RowError("missing_field", name)
    if not isinstance(tests, list):
        raise RowError("wrong_type", f"{name} is {type(tests).__name__}, expected a list of str")
    if not tests:
        raise RowError("empty_field", name)
    setup = _test_setup(raw)
    out = []
    for i, test in enumerate(tests):
        item = f"{name}[{i}]"
        if not isinstance(test, str):
            raise RowError("wrong_type", f"{item} is {type(test).__name__}, expected str")
        if not test.strip():
            raise RowError("empty_field", item)
        _check_characters(item, test)
        _parse_python(item, test, "unparseable_tests")
        out.append(f"{setup}\n{test}" if setup else test)
    return tuple(out)


def _humaneval_tests(raw: dict[str, Any]) -> tuple[tuple[str, ...], str]:
    """The HumanEval form's one test (``test`` then ``check(<entry_point>)``) and the entry point."""
    test = _verbatim_field(raw, "test")
    entry_point = _text_field(raw, "entry_point")
    if not entry_point.isidentifier() or keyword.iskeyword(entry_point):
        raise RowError("invalid_entry_point", f"entry_point {excerpt(entry_point)} is not a Python name")
    module = _parse_python("test", test, "unparseable_tests")
    if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in module.body):
        raise RowError("unparseable_tests", "test defines no top-level check(candidate) function")
    return (f"{test}\ncheck({entry_point})",), entry_point


def _code_solution(raw: dict[str, Any], names: tuple[str, ...], before: str = "") -> str | None:
    """The optional reference program, kept as written; it must parse (after ``before``, a
    HumanEval prompt, whose body it is)."""
    name = _present(raw, names)
    value = raw.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    solution = _verbatim_field(raw, name)
    _parse_python(name, before + solution, "unparseable_solution")
    return solution


def _code_record(raw: dict[str, Any], row_id: str, source: str, license: str, max_prompt_chars: int) -> Record:
    """A code row in the HumanEval form (it has ``test`` or ``entry_point``) or the MBPP form."""
    entry_point: str | None = None
    if "test" in raw or "entry_point" in raw:
        prompt = _text_field(raw, "prompt", max_prompt_chars)
        tests, entry_point = _humaneval_tests(raw)
        solution = _code_solution(raw, ("canonical_solution",), before=prompt + "\n")
    else:
        prompt = _text_field(raw, _present(raw, CODE_FIELDS["prompt"]), max_prompt_chars)
        tests = _mbpp_tests(raw)
        solution = _code_solution(raw, CODE_FIELDS["solution"])
    rid = _row_id(raw, row_id, "id" if raw.get("id") not in (None, "") else "task_id")
    return Record(
        id=rid,
        prompt=prompt,
        reference_answer=solution or "",
        solution=solution,
        source=source,
        license=license,
        task="code",
        tests=tests,
        entry_point=entry_point,
    )


def _require_object(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise RowError("wrong_type", f"row is {type(raw).__name__}, expected an object")
    return raw


def normalise_row(
    raw: Any,
    fmt: str,
    *,
    row_id: str,
    source: str,
    license: str,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
    fields: tuple[str, str] | None = None,
) -> Record:
    """One raw row in ``fmt`` form (gsm8k, math or code) as a :class:`Record`, or :class:`RowError`.

    ``fields`` names a gsm8k or math row's question and answer fields (default: the format's own,
    :data:`FIELDS`); the answer may be in any form :func:`final_answer` reads.
    """
    raw = _require_object(raw)
    if fmt == "code":
        return _code_record(raw, row_id, source, license, max_prompt_chars)
    prompt_field, answer_field = fields or FIELDS[fmt]
    prompt = _text_field(raw, prompt_field, max_prompt_chars)
    answer, solution = final_answer(_answer_text(raw, answer_field), answer_field, boxed_first=fmt == "math")
    rid = _row_id(raw, row_id)
    return Record(id=rid, prompt=prompt, reference_answer=answer, solution=solution, source=source, license=license)


def normalise_pair(
    raw: Any, *, row_id: str, source: str, license: str, max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
) -> PairRecord:
    """One preference pair as a :class:`PairRecord`, or :class:`RowError`.

    ``chosen`` and ``rejected`` are kept as written (a completion's leading indentation can be
    code); a pair whose two sides are the same text teaches nothing and is ``identical_pair``.
    """
    raw = _require_object(raw)
    prompt = _text_field(raw, "prompt", max_prompt_chars)
    chosen, rejected = _verbatim_field(raw, "chosen"), _verbatim_field(raw, "rejected")
    if chosen.strip() == rejected.strip():
        raise RowError("identical_pair", "chosen and rejected are the same text")
    rid = _row_id(raw, row_id)
    return PairRecord(id=rid, prompt=prompt, chosen=chosen, rejected=rejected, source=source, license=license)
