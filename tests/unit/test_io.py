import pytest

from grpoflow.io import atomic_write, read_jsonl, sha256_paths, write_jsonl


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
