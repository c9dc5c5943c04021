"""Mutants of reference programs: one small bug per kind, computed by hand here, deterministic, and always
a program that parses and differs from the source (whole programs and HumanEval-style bodies alike)."""

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from verifiers.code import mutants as reexported
from verifiers.mutants import is_body, mutants


def test_hand_computed_mutants_of_a_one_line_function():
    assert dict(mutants("def f(x):\n    return x + 3")) == {
        "wrong_constant": "def f(x):\n    return x + 4",
        "swapped_operator": "def f(x):\n    return x - 3",
        "deleted_return": "def f(x):\n    return None",
    }  # no comparison, range or index: no off_by_one
    assert reexported is mutants  # the contract names verifiers.code.mutants


def test_each_kind_changes_the_first_site_in_source_order():
    source = "def g(xs, n):\n    if n < len(xs) and xs[n] == 0:\n        return xs[1:n] * 2\n    return []"
    assert dict(mutants(source)) == {
        "wrong_constant": "def g(xs, n):\n    if n < len(xs) and xs[n] == 1:\n        return xs[1:n] * 2\n"
        "    return []",  # 0 <-> 1
        "off_by_one": "def g(xs, n):\n    if n <= len(xs) and xs[n] == 0:\n        return xs[1:n] * 2\n    return []",
        "swapped_operator": "def g(xs, n):\n    if n < len(xs) or xs[n] == 0:\n        return xs[1:n] * 2\n"
        "    return []",
        "deleted_return": "def g(xs, n):\n    if n < len(xs) and xs[n] == 0:\n        return xs[1:n] * 2\n"
        "    return None",
    }
    assert mutants(source) == mutants(source)  # deterministic


def test_off_by_one_shifts_range_stops_slices_and_indices():
    def off(src: str) -> str:
        return dict(mutants(src))["off_by_one"]

    assert off("for i in range(10):\n    print(i)") == "for i in range(11):\n    print(i)"
    assert off("for i in range(1, n, 2):\n    print(i)") == "for i in range(1, n + 1, 2):\n    print(i)"
    assert off("y = x[2:]") == "y = x[3:]"
    assert off("y = x[::-1][:k]") == "y = x[::-1][:k + 1]"  # a step is not a bound
    assert off("y = x[i]") == "y = x[i + 1]"
    assert "off_by_one" not in dict(mutants("y = d['key']"))  # a key, not a position
    assert off("ok = a >= b") == "ok = a > b"


def test_constants_operators_and_flags():
    assert dict(mutants("x = 1"))["wrong_constant"] == "x = 0"
    assert dict(mutants("x = 2.5"))["wrong_constant"] == "x = 3.5"
    assert dict(mutants("flag = True"))["wrong_constant"] == "flag = False"
    assert dict(mutants("n = a * b"))["swapped_operator"] == "n = a // b"
    assert dict(mutants("n = a // b"))["swapped_operator"] == "n = a * b"
    assert dict(mutants("ok = a != b"))["swapped_operator"] == "ok = a == b"
    assert dict(mutants("total += x"))["swapped_operator"] == "total -= x"
    assert dict(mutants("ok = a or b"))["swapped_operator"] == "ok = a and b"


def test_kinds_that_do_not_apply_are_left_out():
    assert mutants("print('hello')") == []
    assert mutants("def f():\n    return None") == []  # already None: no change, no mutant
    assert mutants("def f(x) return x") == []  # does not parse
    assert mutants("") == []


def test_a_body_stays_a_body_that_the_prompt_can_take():
    body = "\n   \n    total = 0\n    for i in range(len(xs)):\n        total += xs[i]\n    return total\n"
    assert is_body(body) and not is_body("def f():\n    pass")
    prompt = 'def f(xs):\n    """Sum."""\n'
    found = dict(mutants(body))
    assert set(found) == {"wrong_constant", "off_by_one", "swapped_operator", "deleted_return"}
    assert found["wrong_constant"] == (
        "    total = 1\n    for i in range(len(xs)):\n        total += xs[i]\n    return total"
    )
    assert found["deleted_return"].endswith("\n    return None")
    for program in found.values():
        assert program.startswith("    ") and not program.startswith("     ")
        ast.parse(prompt + "\n" + program)  # still completes the prompt's function


def test_a_docstring_in_a_body_keeps_its_indentation():
    body = '    """Doc\n    string."""\n    return n - 1\n'
    for _, program in mutants(body):
        ast.parse("def f(n):\n" + program)


# --- property: any generated simple program's mutants parse and differ ---------------------------------

_names = st.sampled_from(["x", "y", "n"])
_atoms = st.one_of(_names, st.integers(-5, 50).map(str), st.sampled_from(["True", "False", "xs[i]", "xs[1:n]"]))
_binops = st.sampled_from(["+", "-", "*", "//", "and", "or", "==", "!=", "<", "<=", ">", ">="])


@st.composite
def _expressions(draw, depth: int = 2) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(_atoms)
    return f"({draw(_expressions(depth - 1))} {draw(_binops)} {draw(_expressions(depth - 1))})"


@st.composite
def _programs(draw) -> tuple[str, bool]:
    """A small function (or its body, indented as in HumanEval) and whether it is a body."""
    lines = [f"y = {draw(_expressions())}"]
    if draw(st.booleans()):
        lines.append(f"for i in range({draw(_expressions(1))}):\n    y = {draw(_expressions())}")
    if draw(st.booleans()):
        lines.append(f"if {draw(_expressions())}:\n    return {draw(_expressions())}")
    lines.append(f"return {draw(_expressions())}")
    body = "".join("    " + line.replace("\n", "\n    ") + "\n" for line in lines)
    if draw(st.booleans()):
        return body, True
    return "def f(x, n, xs):\n" + body, False


@settings(max_examples=300)
@given(_programs())
def test_every_mutant_parses_and_differs_from_the_source(program_and_kind):
    source, body = program_and_kind
    wrap = "def f(x, n, xs):\n" if body else ""
    normalized = ast.unparse(ast.parse(wrap + source))
    found = mutants(source)
    kinds = [kind for kind, _ in found]
    assert len(kinds) == len(set(kinds)) and "deleted_return" in kinds  # one per kind; each program returns
    for kind, program in found:
        assert program != source, kind
        mutated = ast.unparse(ast.parse(wrap + program))
        assert mutated != normalized, kind  # a real change, not a reformatting
