import os
from pathlib import Path

import pytest

from grpoflow.io import atomic_write, read_jsonl, sha256_paths, write_jsonl, written_by_tools

ROOT = Path(__file__).resolve().parents[2]


def test_interrupted_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.jsonl"
    write_jsonl(target, [{"a": 1}])
    with pytest.raises(RuntimeError):
        with atomic_write(target) as fh:
            fh.write("half a line")
            raise RuntimeError("killed")
    assert read_jsonl(target) == [{"a": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_written_files_get_normal_permissions(tmp_path):
    write_jsonl(tmp_path / "x.jsonl", [])
    assert (tmp_path / "x.jsonl").stat().st_mode & 0o044  # readable by group/others under a normal umask


def test_hash_depends_on_content_and_names_not_on_listing_order(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_text("1")
    (tmp_path / "d" / "b").write_text("2")
    h = sha256_paths([tmp_path / "d"], root=tmp_path)
    assert h == sha256_paths([tmp_path / "d"], root=tmp_path)
    (tmp_path / "d" / "b").write_text("3")
    h2 = sha256_paths([tmp_path / "d"], root=tmp_path)
    assert h2 != h
    (tmp_path / "d" / "b").rename(tmp_path / "d" / "c")
    assert sha256_paths([tmp_path / "d"], root=tmp_path) != h2


@pytest.mark.parametrize("bad", [b'{"a": ', b'{"a": "\xff"}', b"[" * 100_000])
def test_read_jsonl_names_the_file_and_line_of_a_broken_row(tmp_path, bad):
    target = tmp_path / "rows.jsonl"
    target.write_bytes(b'{"a": 1}\n\n' + bad + b"\n")
    with pytest.raises(ValueError, match=f"{target}, line 3: not a UTF-8 JSON row"):
        read_jsonl(target)


def test_write_jsonl_can_refuse_nan_and_writes_utf8(tmp_path):
    target = tmp_path / "rows.jsonl"
    with pytest.raises(ValueError):
        write_jsonl(target, [{"x": float("nan")}], allow_nan=False)
    assert not target.exists()
    write_jsonl(target, [{"x": "café"}], allow_nan=False)
    assert target.read_bytes() == '{"x": "café"}\n'.encode()


# Files inside a hashed folder: those tools write beside the code (bytecode caches, compiled modules, a
# Finder's .DS_Store, or anything in a folder so named) and those that are the code, whatever their name.
TOOL_WRITTEN = [
    "__pycache__/math.cpython-311.pyc",
    "sub/__pycache__/x.pyc",
    "stray.pyc",
    "old.pyo",
    ".pyc",
    "built.pyd/inner.txt",
    ".DS_Store",
    "a/.DS_Store",
    "b/.DS_Store/inner.txt",
]
CONTENT = [
    *("math.py", "sub/x.py", "pyc.py", "DS_Store", "notes/.DS_Store.md", "data.pyc.json", "__pycache__.py", "ok.PYC"),
]


def _tree(folder: Path, names: list[str]) -> None:
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(name)


def test_the_files_no_folder_hash_sees_are_those_dvc_ignores(tmp_path):
    from dvc.ignore import DvcIgnorePatterns

    _tree(tmp_path, TOOL_WRITTEN + CONTENT)
    lines = [line.strip() for line in (ROOT / ".dvcignore").read_text().splitlines()]
    ignore = DvcIgnorePatterns([line for line in lines if line and not line.startswith("#")], str(tmp_path), os.sep)
    seen_by_dvc = set()
    for folder, dirs, files in os.walk(tmp_path):  # as DVC walks a folder dependency
        dirs[:], files = ignore(folder, dirs, files)
        seen_by_dvc |= {Path(folder, f).relative_to(tmp_path).as_posix() for f in files}
    assert seen_by_dvc == set(CONTENT)
    assert [p for p in TOOL_WRITTEN + CONTENT if not written_by_tools(p)] == CONTENT


def test_a_folders_hash_does_not_see_what_tools_write_beside_the_code(tmp_path):
    folder = tmp_path / "__pycache__" / "verifiers"  # a hashed folder may itself sit under such a name
    _tree(folder, CONTENT)
    before = sha256_paths([folder], root=tmp_path)
    _tree(folder, TOOL_WRITTEN)
    assert sha256_paths([folder], root=tmp_path) == before
    (folder / "sub" / "x.py").write_text("changed")
    assert sha256_paths([folder], root=tmp_path) != before
