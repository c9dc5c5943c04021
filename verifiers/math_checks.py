"""math-verify within a time budget, in any thread.

math-verify's own timeout is ``signal.alarm``, which works only in the main thread (elsewhere it
raises, and a blanket ``except`` turned that into a silent 0). Here every check gets
:data:`CHECK_BUDGET_S` from an interval timer in the main thread; a caller on any other thread has
its check run by a small pool of child processes (their main threads take the same timer), so the
result is the same in any thread and a pathological answer (``10^{10^{10}}``) cannot hang a caller.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

CHECK_BUDGET_S = 2.0  # wall time for one math-verify check (parse both, compare)
_WORKER_START_S = 120.0  # a checker process imports SymPy: slow on a loaded machine
_WORKER_SLACK_S = 10.0  # beyond the budget, before a checker process counts as hung
_T = TypeVar("_T")
_log = logging.getLogger("verifiers.math")


class VerifierUnavailable(RuntimeError):
    """The math checker cannot run at all (its helper process did not start): not a wrong answer."""


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


def _run_check(op: str, args: Sequence[str]) -> bool:
    """One check in this process's main thread, within :data:`CHECK_BUDGET_S`."""
    _warm_up()
    fn: Callable[[], bool] = {"equal": lambda: _compare(*args), "parses": lambda: bool(_parse(*args))}[op]
    if not hasattr(signal, "setitimer"):  # no interval timer (Windows): the pool's deadline still applies
        return fn()
    return bool(_within_budget(fn, CHECK_BUDGET_S))


# --- the same checks for callers off the main thread ---------------------------------------------


def serve_checks() -> None:
    """Checker-process loop: a JSON ``[op, *args]`` per line on stdin, ``1`` or ``0`` per line out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this process ends
    out, sys.stdout = sys.stdout, sys.stderr  # stray prints must not corrupt the protocol
    _warm_up()
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            op, *args = json.loads(line)
            verdict = _run_check(op, args)
        except Exception:  # noqa: BLE001 - as in score(): a crash on one answer scores 0, not silently
            _log.warning("math check failed; counts as not verified", exc_info=True)
            verdict = False
        out.write("1\n" if verdict else "0\n")
        out.flush()


class _CheckerDied(Exception):
    """A checker process ended or stopped answering in the middle of a check."""


class _Checker:
    """One child process running :func:`serve_checks`."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        command = [sys.executable, "-c", "from verifiers.math_checks import serve_checks; serve_checks()"]
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                env={**os.environ, "PYTHONPATH": path},
            )
        except OSError as exc:
            raise VerifierUnavailable(f"cannot start the math checker process {command}: {exc}") from exc
        if self._read_line(_WORKER_START_S) != b"ready":
            self.close()
            raise VerifierUnavailable(
                f"the math checker process {command} did not start within {_WORKER_START_S:.0f} s; see its stderr above"
            )

    def _read_line(self, timeout: float) -> bytes | None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        return line.strip() if line.endswith(b"\n") else None

    def check(self, op: str, args: Sequence[str]) -> bool:
        """The child's verdict; :class:`_CheckerDied` when it dies or outlives the budget."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps([op, *args]).encode() + b"\n")
        except OSError as exc:
            raise _CheckerDied(str(exc)) from exc
        answer = self._read_line(CHECK_BUDGET_S + _WORKER_SLACK_S)
        if answer not in (b"0", b"1"):
            raise _CheckerDied(f"no answer within {CHECK_BUDGET_S + _WORKER_SLACK_S:.0f} s")
        return answer == b"1"

    def close(self) -> None:
        """End the child: EOF first, a kill if it does not go."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        """End the child now (it hung or broke the protocol)."""
        self.proc.kill()
        self.proc.wait()


class _CheckerPool:
    """Up to ``size`` checker processes, started on first use, shared by all threads."""

    def __init__(self, size: int):
        self.size = size
        self._pid = os.getpid()
        self._idle: list[_Checker] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)

    def run(self, op: str, args: Sequence[str]) -> bool:
        """One check in a child; a child that dies or hangs is replaced and the check counts as failed."""
        with self._slots:
            with self._lock:
                checker = self._idle.pop() if self._idle else None
            if checker is not None and checker.proc.poll() is not None:  # died while idle: not this check's fault
                checker.kill()
                checker = None
            checker = checker or _Checker()
            try:
                verdict = checker.check(op, args)
            except _CheckerDied as exc:
                _log.warning(
                    "math checker process failed on %r (%s); replaced, answer counts as not verified",
                    [op, *(a[:80] for a in args)],
                    exc,
                )
                checker.kill()
                return False
            with self._lock:
                self._idle.append(checker)
            return verdict

    def close(self) -> None:
        """End every idle child (at exit)."""
        if os.getpid() != self._pid:
            return  # a forked copy: the children belong to the parent
        with self._lock:
            idle, self._idle = self._idle, []
        for checker in idle:
            checker.close()


_POOL: _CheckerPool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _CheckerPool:
    """The process-wide checker pool (a fresh one after a fork)."""
    global _POOL, _POOL_LOCK
    if _POOL is not None and _POOL._pid != os.getpid():
        _POOL, _POOL_LOCK = None, threading.Lock()
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _CheckerPool(min(4, os.cpu_count() or 1))
            atexit.register(_POOL.close)
        return _POOL


def check(op: str, *args: str) -> bool:
    """A math-verify check in this thread if it is the main one, else in a checker process."""
    if threading.current_thread() is threading.main_thread():
        return _run_check(op, args)
    return _pool().run(op, args)
