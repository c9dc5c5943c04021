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
