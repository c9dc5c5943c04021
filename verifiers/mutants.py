"""Mutants of a reference program: small, plausible bugs that a code task's tests must catch.

The code gate scores each mutant as a completion that must fail, so a mutant that passes every test
shows a weakness of that row's tests (the tests cannot tell a buggy program from the reference).
Everything here is pure :mod:`ast`: nothing is executed.

Each kind changes the first applicable site in source order, so the same solution always yields the
same mutants:

- ``wrong_constant``: a number ``c`` becomes ``c + 1`` (``0`` and ``1`` swap), ``True``/``False`` flip;
- ``off_by_one``: ``<``/``<=`` or ``>``/``>=`` swap, or a ``range`` stop, a slice bound or an index
  grows by one;
- ``swapped_operator``: ``+``/``-``, ``*``/``//``, ``and``/``or``, ``==``/``!=`` swap;
- ``deleted_return``: the last ``return X`` becomes ``return None``.

Solutions may be whole programs (MBPP) or function bodies (HumanEval's canonical solutions, indented by
four spaces and appended to the prompt). A body is parsed inside a dummy function and written back
indented by four spaces, so ``prompt + "\\n" + mutant`` still runs.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

MutateFn = Callable[[ast.AST], bool]

_BODY_HEADER = "def _():\n"
_COMPARE_BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
_OPERATOR_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
}
_BOOLEAN_SWAPS: dict[type[ast.boolop], type[ast.boolop]] = {ast.And: ast.Or, ast.Or: ast.And}
_EQUALITY_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def is_body(solution: str) -> bool:
    """Whether ``solution`` is a function body (its first non-blank line is indented), not a program."""
    first = next((line for line in solution.splitlines() if line.strip()), "")
    return first[:1] in (" ", "\t")


def _parse(solution: str) -> ast.Module | None:
    """The solution's tree (a body wrapped in ``def _():``), or None when it does not parse."""
    source = _BODY_HEADER + solution if is_body(solution) else solution
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):  # ValueError: a NUL byte; RecursionError: deep nesting
        return None


def _unparse(tree: ast.Module, body: bool) -> str:
    """Source for ``tree``; for a body, the dummy function's lines without its header (ast.unparse
    indents them by four spaces, as HumanEval prompts expect)."""
    text = ast.unparse(tree)
    return text.split("\n", 1)[1] if body else text


def _in_source_order(tree: ast.AST) -> list[ast.expr | ast.stmt]:
    """Every expression and statement (all that is mutated), by (line, column); an outer node before the
    inner ones it starts with (``ast.walk`` is breadth-first and the sort is stable)."""
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.expr, ast.stmt))]
    return sorted(nodes, key=lambda n: (n.lineno, n.col_offset))


def _plus_one(expr: ast.expr) -> ast.expr:
    """``expr + 1``, folded when ``expr`` is an integer literal."""
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return ast.Constant(expr.value + 1)
    return ast.BinOp(expr, ast.Add(), ast.Constant(1))


# --- one mutation per kind: each changes ``node`` in place and says whether it applied --------------


def _wrong_constant(node: ast.AST) -> bool:
    """A number: 0 <-> 1, else one more; a bool: flipped."""
    if not isinstance(node, ast.Constant):
        return False
    value = node.value
    if isinstance(value, bool):
        node.value = not value
    elif isinstance(value, int):
        node.value = {0: 1, 1: 0}.get(value, value + 1)
    elif isinstance(value, float):
        node.value = {0.0: 1.0, 1.0: 0.0}.get(value, value + 1.0)
    else:
        return False
    return True


def _off_by_one(node: ast.AST) -> bool:
    """A boundary comparison loosened or tightened, or a range stop, slice bound or index plus one."""
    if isinstance(node, ast.Compare):
        return _swap_first(node, _COMPARE_BOUNDARY)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        stop = 0 if len(node.args) == 1 else 1  # range(stop) or range(start, stop[, step])
        if node.keywords or not 1 <= len(node.args) <= 3 or isinstance(node.args[stop], ast.Starred):
            return False
        node.args[stop] = _plus_one(node.args[stop])
        return True
    if isinstance(node, ast.Slice):
        for bound in ("lower", "upper"):
            if getattr(node, bound) is not None:
                setattr(node, bound, _plus_one(getattr(node, bound)))
                return True
        return False
    if isinstance(node, ast.Subscript) and _looks_like_index(node.slice):
        node.slice = _plus_one(node.slice)
        return True
    return False


def _looks_like_index(expr: ast.expr) -> bool:
    """A subscript that is plausibly a position (a name, arithmetic, an int), not a key like ``d["a"]``."""
    if isinstance(expr, ast.Constant):
        return type(expr.value) is int
    return isinstance(expr, (ast.Name, ast.BinOp, ast.UnaryOp, ast.Call))


def _swapped_operator(node: ast.AST) -> bool:
    """``+``/``-``, ``*``/``//``, ``and``/``or`` or ``==``/``!=`` swapped (``+=`` and ``-=`` too)."""
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _OPERATOR_SWAPS:
        node.op = _OPERATOR_SWAPS[type(node.op)]()
        return True
    if isinstance(node, ast.BoolOp):
        node.op = _BOOLEAN_SWAPS[type(node.op)]()
        return True
    if isinstance(node, ast.Compare):
        return _swap_first(node, _EQUALITY_SWAPS)
    return False


def _swap_first(node: ast.Compare, swaps: dict[type[ast.cmpop], type[ast.cmpop]]) -> bool:
    """Replace the first of ``node``'s comparison operators that ``swaps`` maps."""
    for i, op in enumerate(node.ops):
        if type(op) in swaps:
            node.ops[i] = swaps[type(op)]()
            return True
    return False


def _deleted_return(tree: ast.AST) -> bool:
    """The last ``return X`` (X not already None) in source order returns None instead."""
    returns = [
        n
        for n in _in_source_order(tree)
        if isinstance(n, ast.Return)
        and n.value is not None
        and not (isinstance(n.value, ast.Constant) and n.value.value is None)
    ]
    if not returns:
        return False
    returns[-1].value = ast.Constant(None)
    return True


def _first_site(mutate: MutateFn) -> MutateFn:
    """A whole-tree mutation: ``mutate`` applied to the first node, in source order, it applies to."""
    return lambda tree: any(mutate(node) for node in _in_source_order(tree))


KINDS: dict[str, MutateFn] = {
    "wrong_constant": _first_site(_wrong_constant),
    "off_by_one": _first_site(_off_by_one),
    "swapped_operator": _first_site(_swapped_operator),
    "deleted_return": _deleted_return,
}


def mutants(solution: str) -> list[tuple[str, str]]:
    """``(kind, program)`` for each kind of :data:`KINDS` that applies to ``solution`` and changes it.

    A body-only solution gives body-only mutants (four-space indented); a solution that does not parse
    gives none. Programs are ``ast.unparse`` output, so comments and layout are not kept.
    """
    body = is_body(solution)
    original = _parse(solution)
    if original is None:
        return []
    unchanged = _unparse(original, body)
    found = []
    for kind, mutate in KINDS.items():
        tree = _parse(solution)  # a fresh tree per kind: each mutant carries exactly one change
        assert tree is not None  # it parsed above
        if mutate(tree):
            program = _unparse(ast.fix_missing_locations(tree), body)
            if program != unchanged:
                found.append((kind, program))
    return found
