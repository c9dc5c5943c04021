"""The checker process of :mod:`verifiers.math_checks`: math-verify within a time budget in its main
thread, under an address-space limit, dying with its parent, answering one JSON request per line
(:func:`serve_checks`). The caller's side, the pool of these processes, is :mod:`verifiers.math_checks`."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

CHECK_BUDGET_S = 2.0  # wall time for one math-verify check (parse both, compare)
CHECKER_MEMORY_BYTES = 1 << 30  # address space of one checker process (about 85 MB when warm)
_T = TypeVar("_T")
_log = logging.getLogger("verifiers.math")


# --- math-verify within a time budget (main thread) ---------------------------------------------


class _OutOfTime(BaseException):
    """Raised by the budget timer; a BaseException so that math-verify's and SymPy's ``except
    Exception`` let it through instead of carrying on without a limit."""


class _Budget:
    """An ITIMER_REAL deadline for the main thread that restores any timer and handler it displaced."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.armed = False
        self._previous_handler: Any = None
        self._previous_timer = (0.0, 0.0)
        self._started = 0.0

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self.armed:
            raise _OutOfTime

    def arm(self) -> None:
        self._previous_handler = signal.signal(signal.SIGALRM, self._on_alarm)
        self._started = time.monotonic()
        self.armed = True
        # Fire again every 0.1 s in case a bare ``except:`` in SymPy swallowed the first one.
        self._previous_timer = signal.setitimer(signal.ITIMER_REAL, self.seconds, 0.1)

    def disarm(self) -> None:
        if not self.armed:
            return
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        # None: the previous handler was not set from Python; the default is the best stand-in.
        signal.signal(signal.SIGALRM, signal.SIG_DFL if self._previous_handler is None else self._previous_handler)
        delay, interval = self._previous_timer
        if delay > 0:  # someone else's alarm was pending: give it back what is left of it
            left = max(delay - (time.monotonic() - self._started), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def _within_budget(fn: Callable[[], _T], seconds: float) -> _T | None:
    """``fn()``, or None when it runs past ``seconds``. Main thread only."""
    budget = _Budget(seconds)
    try:
        budget.arm()
        try:
            return fn()
        finally:
            budget.disarm()
    except _OutOfTime:
        budget.disarm()  # idempotent: the timer may have fired between ``finally`` and disarm
        _log.warning("math-verify ran past its %.1f s budget; the answer counts as not verified", seconds)
        return None


class _OwnTimeoutNotice(logging.Filter):
    """Drops math-verify's 'Timeout is disabled' warning: the timeout is :class:`_Budget`'s."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


_MATH_VERIFY_LOGGERS = ("math_verify.parser", "math_verify.grader")
for _name in _MATH_VERIFY_LOGGERS:
    logging.getLogger(_name).addFilter(_OwnTimeoutNotice())


def _parse(latex: str) -> list:
    """math-verify's parse of inline math, no string fallback, no signal-based timeout of its own."""
    from math_verify import parse

    return parse(latex, fallback_mode="no_fallback", parsing_timeout=None) if latex else []


def _verify(gold: list, pred: list) -> bool:
    from math_verify import verify

    return bool(verify(gold, pred, timeout_seconds=None))


def _is_relation(expr: Any) -> bool:
    """An equation, inequality or logical combination of them (SymPy ``Symbol`` is Boolean too)."""
    from sympy.core.relational import Relational
    from sympy.logic.boolalg import BooleanAtom, BooleanFunction

    return isinstance(expr, (Relational, BooleanFunction, BooleanAtom))


def _equation_sides(expr: Any) -> list | None:
    """The sides of ``a = b`` or of a chain ``a = b = c``; None for any other relation."""
    from sympy import And, Eq

    if isinstance(expr, Eq):
        return [expr.lhs, expr.rhs]
    if isinstance(expr, And) and all(isinstance(a, Eq) for a in expr.args):
        return [side for a in expr.args for side in (a.lhs, a.rhs)]
    return None


def _equation_states(gold: list, equation: Any) -> bool:
    """Whether an equation answers a gold that is not a relation: every side is either a variable
    name (not one of the gold's own variables) or equal to the gold, and at least one is a value."""
    from sympy import Symbol

    sides = _equation_sides(equation)
    if not sides:
        return False
    gold_symbols = set().union(*(getattr(g, "free_symbols", set()) for g in gold))
    values = [s for s in sides if not (isinstance(s, Symbol) and s not in gold_symbols)]
    return bool(values) and all(_verify(gold, [v]) for v in values)


def _compare(gold_latex: str, pred_latex: str) -> bool:
    """math-verify's verdict, gold first, with the relation rule of the module docstring."""
    gold, pred = _parse(gold_latex), _parse(pred_latex)
    if not gold or not pred:
        return False
    if _is_relation(pred[0]) and not _is_relation(gold[0]):
        return _equation_states(gold, pred[0])
    return _verify(gold, pred)


_warm = False


def _warm_up() -> None:
    """Import math-verify and SymPy and fill their caches outside any budget, once: an import that
    the timer interrupted would leave half-initialised modules behind."""
    global _warm
    if not _warm:
        _compare("$(x+1)^2$", "$x^2+2x+1$")  # SymPy's simplify imports much on first use
        _compare("$\\frac{1}{2}$", "$50$%")
        _warm = True


# --- the checker process -------------------------------------------------------------------------


def _run_check(op: str, args: Sequence[str], budget_s: float) -> tuple[bool, str]:
    """One check in this process's main thread: the verdict, and ``budget`` when it ran out of time."""
    _warm_up()
    fn: Callable[[], bool] = {"equal": lambda: _compare(*args), "parses": lambda: bool(_parse(*args))}[op]
    if not hasattr(signal, "setitimer"):  # no interval timer (Windows): the parent's deadline still applies
        return fn(), ""
    verdict = _within_budget(fn, budget_s)
    return (False, "budget") if verdict is None else (bool(verdict), "")


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when the thread that started it ends (Linux), and end now
    when the parent is already gone."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no prctl: end-of-file on stdin is the remaining signal
            pass
    if os.getppid() != parent:
        os._exit(0)


def _limit_memory(limit: int) -> None:
    """Cap this process's address space at ``limit`` bytes (or the hard limit, when lower)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file of the heap behind


def _serve_one(line: str) -> tuple[bool, str]:
    """The reply to one request ``[op, budget_s, *args]``: a verdict and why it is no verdict."""
    try:
        op, budget_s, *args = json.loads(line)
        return _run_check(op, args, float(budget_s))
    except MemoryError:
        return False, "memory"
    except Exception:  # noqa: BLE001 - as in score(): a crash on one answer scores 0, not silently
        _log.warning("math check failed; counts as not verified", exc_info=True)
        return False, "error"


def serve_checks(parent: int = 0, memory_bytes: int = CHECKER_MEMORY_BYTES) -> None:
    """Checker-process loop: a JSON ``[op, budget_s, *args]`` per line on stdin, ``1``, ``0`` or
    ``0 <reason>`` per line out. Ends at end-of-file, and after running out of memory."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this process ends
    if parent:
        _die_with_parent(parent)
    _limit_memory(memory_bytes)
    out, sys.stdout = sys.stdout, sys.stderr  # stray prints must not corrupt the protocol
    _warm_up()
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        verdict, reason = _serve_one(line)
        out.write("1\n" if verdict else f"0 {reason}\n" if reason else "0\n")
        out.flush()
        if reason == "memory":  # a heap that ran out once is not worth keeping
            return
