"""fuseplan.files: input checks, output checks and atomic writes."""

from __future__ import annotations

import json
import os

import pytest

from fuseplan.errors import FuseplanError
from fuseplan.files import (atomic_directory, atomic_file, atomic_path, check_input, check_output_dir, check_outputs,
                            write_text)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as handle:
            handle.write(b"half of the new")
            raise RuntimeError("disk full, say")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(path) as temporary:
            temporary.write_text("x")
            raise KeyboardInterrupt
    assert path.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_a_write_replaces_the_file_in_one_step(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    inode = path.stat().st_ino
    write_text(path, "new")
    assert path.read_text() == "new"
    assert path.stat().st_ino != inode  # a new file renamed over the old one, not the old one rewritten


def test_check_outputs(tmp_path):
    source = tmp_path / "model.onnx"
    source.write_bytes(b"m")
    with pytest.raises(FuseplanError, match="refusing to overwrite the input"):
        check_outputs([("plan", tmp_path / "." / "model.onnx")], [source])
    os.link(source, tmp_path / "hard.onnx")
    with pytest.raises(FuseplanError, match="refusing to overwrite the input"):
        check_outputs([("plan", tmp_path / "hard.onnx")], [source])
    with pytest.raises(FuseplanError, match="are the same file"):
        check_outputs([("plan", tmp_path / "a"), ("model", tmp_path / "." / "a")], [source])
    with pytest.raises(FuseplanError, match="is a directory"):
        check_outputs([("plan", tmp_path)])
    with pytest.raises(FuseplanError, match="does not exist"):
        check_outputs([("plan", tmp_path / "missing" / "a.json")])
    check_outputs([("plan", tmp_path / "a.json"), ("model", None), ("picture", tmp_path / "b.png")], [source])


def test_check_input_refuses_what_is_not_a_regular_file(tmp_path):
    with pytest.raises(FuseplanError, match="no such file"):
        check_input(tmp_path / "missing")
    with pytest.raises(FuseplanError, match="is a directory"):
        check_input(tmp_path)
    with pytest.raises(FuseplanError, match="is a device"):
        check_input("/dev/null")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(FuseplanError, match="11 bytes is more than the 10 bytes"):
        check_input(big, limit=10)


def test_atomic_directory(tmp_path):
    target = tmp_path / "new" / "data"
    with atomic_directory(target) as staging:
        (staging / "a.txt").write_text("a")
        assert not target.exists()
    assert (target / "a.txt").read_text() == "a"
    with pytest.raises(FuseplanError, match="not an empty directory"):
        with atomic_directory(target):
            pass
    failed = tmp_path / "failed"
    with pytest.raises(RuntimeError):
        with atomic_directory(failed) as staging:
            (staging / "a.txt").write_text("a")
            raise RuntimeError
    assert not failed.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["new"]
    with pytest.raises(FuseplanError, match="is not a directory"):
        check_output_dir(target / "a.txt" / "sub")


def test_json_nesting_counts_structure_not_brackets_inside_strings():
    from fuseplan.documents import MAX_DEPTH, loads_json

    names = json.dumps({"nodes": ["[" * 200 + '\\"{' * 50, "]]]"]}).encode()
    assert loads_json(names, "p.json", "plan file")["nodes"][1] == "]]]"
    nested = ("[" * MAX_DEPTH + "]" * MAX_DEPTH).encode()
    assert loads_json(nested, "p.json", "plan file") is not None
    with pytest.raises(FuseplanError, match=f"p.json: not a plan file .*more than {MAX_DEPTH} levels"):
        loads_json(b"[" + nested + b"]", "p.json", "plan file")
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        with pytest.raises(FuseplanError, match="is not a finite number"):
            loads_json(b'{"buffer_bytes": ' + constant + b"}", "p.json", "plan file")


def test_yaml_aliases_are_counted_as_expanded():
    from fuseplan.documents import MAX_YAML_NODES, loads_yaml

    shared = "a: &a [1, 2, 3]\nb: [*a, *a, *a]\n"
    assert loads_yaml(shared, "h.yaml", "hardware file") == {"a": [1, 2, 3], "b": [[1, 2, 3]] * 3}
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 10) + "]" for k in range(1, 7)]  # 10^7 values
    with pytest.raises(FuseplanError, match=f"more than {MAX_YAML_NODES:,} values"):
        loads_yaml("\n".join(levels), "h.yaml", "hardware file")
