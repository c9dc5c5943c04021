"""The fingerprints of a stage's inputs (flows/lineage.py): what counts as a change, and what does not."""

from __future__ import annotations

import os

from flows import lineage


def test_a_file_that_appears_goes_or_changes_is_named_and_what_tools_write_is_not_an_input(tmp_path):
    code = tmp_path / "verifiers"
    code.mkdir()
    (code / "math.py").write_text("x = 1\n")
    (tmp_path / "data.jsonl").write_text("{}\n")
    deps = [str(code), str(tmp_path / "data.jsonl")]
    before = lineage.fingerprint(deps)
    # A stage's first import writes bytecode into the code it depends on: no change of its inputs.
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "math.cpython-311.pyc").write_bytes(b"\x00")
    (code / "stray.pyc").write_bytes(b"\x00")
    (code / ".DS_Store").write_bytes(b"\x00")  # and a Finder window on the folder neither
    assert lineage.differences(before, lineage.fingerprint(deps)) == []
    (code / "new.py").write_text("y = 2\n")
    (tmp_path / "data.jsonl").write_text("{}\n{}\n")
    os.remove(code / "math.py")
    assert lineage.differences(before, lineage.fingerprint(deps)) == [
        f"{tmp_path / 'data.jsonl'} changed",
        f"{code / 'math.py'} was removed",
        f"{code / 'new.py'} appeared",
    ]
