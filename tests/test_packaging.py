"""The build as a user meets it: a source tree imported from another folder, in a fresh
interpreter, with a build cache of its own (CPU kernel only, so one real build of about a
minute on 2 cores; the failing-compiler cases take seconds). Installing the wheel and the
sdist is checked by .ci/run."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pyg_edgedot
from pyg_edgedot import _build

PACKAGE = Path(pyg_edgedot.__file__).resolve().parent

FAKE_COMPILER = """#!/bin/sh
case "$1" in
  -v|--version) echo "gcc version 13.2.0"; exit 0;;
  -dump*) echo "13.2.0"; exit 0;;
esac
echo "fake.cpp:1:1: error: this is not a compiler (pyg_edgedot test)" >&2
exit 1
"""


def _tree(dest: Path, comment: str = "") -> Path:
    """A source tree like a checkout: the package (without anything built into it) and csrc/."""
    shutil.copytree(PACKAGE, dest / "pyg_edgedot", ignore=shutil.ignore_patterns(
        "__pycache__", "*.so", "pyg_edgedot_*.json", "csrc"))
    shutil.copytree(_build.find_csrc(), dest / "csrc")
    if comment:
        with open(dest / "csrc" / "edge_dot.cpp", "a") as f:
            f.write(f"// {comment}\n")
    return dest


def _env(tree: Path, cache: Path, fake_compiler: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYG_EDGEDOT_")
           and k not in ("CXX", "PYTHONPATH")}
    env.update(PYTHONPATH=str(tree), TORCH_EXTENSIONS_DIR=str(cache), PYG_EDGEDOT_CUDA="0",
               PYTHONWARNINGS="default")
    if fake_compiler:
        bindir = cache.parent / "fakebin"
        if not bindir.is_dir():  # once: a changed compiler is a reason to build again
            bindir.mkdir()
            (bindir / "g++").write_text(FAKE_COMPILER)
            (bindir / "g++").chmod(0o755)
        env["CXX"] = str(bindir / "g++")
    return env


def _run(args, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=900)


IMPORT = ["-c", "import pyg_edgedot; print(pyg_edgedot.backends()['cpu'], "
                "pyg_edgedot._backend.loaded().build.library_path)"]


def _entries(cache: Path):
    return sorted(p.name for p in (cache / "pyg_edgedot").iterdir())


@pytest.mark.slow
def test_a_second_import_after_a_build_builds_nothing_and_prints_nothing(tmp_path):
    tree, cache = _tree(tmp_path / "tree"), tmp_path / "cache"
    env = _env(tree, cache)
    first = _run(IMPORT, env, tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[0] == "cpp"
    library = Path(first.stdout.split()[1])
    assert library.parent.parent == cache / "pyg_edgedot"
    assert first.stderr.count("pyg_edgedot: building the C++ kernels") == 1
    assert "done in" in first.stderr
    mtime = library.stat().st_mtime
    second = _run(IMPORT, env, tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert second.stderr == ""  # no build line, no torch log lines, no warning
    assert library.stat().st_mtime == mtime
    assert _entries(cache) == [library.parent.name]


def test_a_failing_compiler_warns_once_with_its_error_and_is_not_retried(tmp_path):
    tree, cache = _tree(tmp_path / "tree"), tmp_path / "cache"
    env = _env(tree, cache, fake_compiler=True)
    error = "fake.cpp:1:1: error: this is not a compiler (pyg_edgedot test)"
    for attempt in range(2):
        result = _run(IMPORT, env, tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[0] == "python"
        warnings = [ln for ln in result.stderr.splitlines() if "Warning" in ln]
        assert len(warnings) == 1, result.stderr
        assert error in warnings[0]
        assert "!! WARNING !!" not in result.stderr and "No CUDA runtime" not in result.stderr
        # The first import tries once and says so; the second reads the recorded failure.
        assert result.stderr.count("pyg_edgedot: building the C++ kernels in") == (1 - attempt)
    report = _run(["-m", "pyg_edgedot"], env, tmp_path)
    assert report.returncode == 0
    assert error in report.stdout and "build.log" in report.stdout
    rebuild = _run(["-m", "pyg_edgedot", "--build"], env, tmp_path)
    assert rebuild.returncode != 0
    assert rebuild.stderr.count(error) >= 2  # the warning, and the compiler's full output
    assert "ninja" in rebuild.stderr  # the full log, not only its first error


def test_two_source_trees_get_two_cache_entries(tmp_path):
    cache = tmp_path / "cache"
    tree_a = _tree(tmp_path / "a")
    tree_b = _tree(tmp_path / "b", comment="another checkout")
    tree_c = _tree(tmp_path / "c")  # the same sources as a
    for tree in (tree_a, tree_b):
        result = _run(IMPORT, _env(tree, cache, fake_compiler=True), tmp_path)
        assert result.stderr.count("pyg_edgedot: building the C++ kernels in") == 1, result.stderr
    assert len(_entries(cache)) == 2
    for tree in (tree_a, tree_b, tree_c):  # each finds its own record: nothing builds again
        result = _run(IMPORT, _env(tree, cache, fake_compiler=True), tmp_path)
        assert "pyg_edgedot: building" not in result.stderr, result.stderr
    assert len(_entries(cache)) == 2
    # Another compiler: the recorded failure is tried again, in the same cache entry.
    with open(cache.parent / "fakebin" / "g++", "a") as f:
        f.write("# another version\n")
    result = _run(IMPORT, _env(tree_a, cache, fake_compiler=True), tmp_path)
    assert result.stderr.count("pyg_edgedot: building the C++ kernels in") == 1, result.stderr
    assert len(_entries(cache)) == 2


def test_the_build_key_names_what_the_library_depends_on(monkeypatch):
    csrc = _build.find_csrc()
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    key_80 = _build.build_key("cuda", csrc)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    key_90 = _build.build_key("cuda", csrc)
    assert _build.key_id(key_80) != _build.key_id(key_90)
    assert _build.key_id(_build.build_key("cpu", csrc)) != _build.key_id(key_90)
    assert key_90["sources"] == _build.source_hash(csrc) and key_90["torch"]


def test_gencode_flags_follow_torchs_syntax():
    assert _build.gencode_flags("8.0;9.0+PTX") == [
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90"]


def test_short_reason_is_the_compilers_first_error_not_the_command_line():
    message = (
        "Error building extension 'pyg_edgedot_cpu': [1/6] c++ -MMD -MF edge_dot.o.d "
        "-DTORCH_EXTENSION_NAME=pyg_edgedot_cpu -I/home/u/errors/csrc -O3 -c "
        "/home/u/errors/csrc/edge_dot.cpp -o edge_dot.o\n"
        "FAILED: edge_dot.o\n"
        "c++ -MMD -MF edge_dot.o.d -I/home/u/errors/csrc -c edge_dot.cpp -o edge_dot.o\n"
        "/home/u/csrc/edge_dot.cpp:12:3: error: 'foo' was not declared in this scope\n"
        "/home/u/csrc/edge_dot.cpp:13:3: error: expected ';'\n"
        "ninja: build stopped: subcommand failed.\n")
    assert _build.short_reason(message) == \
        "/home/u/csrc/edge_dot.cpp:12:3: error: 'foo' was not declared in this scope"
    assert _build.short_reason("c++ ... -c x.cpp\n/bin/sh: 1: c++: not found\n") == \
        "/bin/sh: 1: c++: not found"


def test_the_sources_are_found_and_the_schemas_read():
    assert _build.find_csrc() in _build.CSRC_CANDIDATES
    assert "edge_dot" in _build.schemas()["edge_dot"]


def test_every_csrc_check_builds_its_message_without_an_ostream():
    # csrc/check.h: TORCH_CHECK's ostream crashes the GPU image's process on an integer
    # (benchmarks/NOTES.md, "Why Python raises the errors"), so every check is a
    # PYG_EDGEDOT_CHECK, whose parts must be strings, dtypes or devices (numbers through
    # std::to_string; anything else does not compile).
    csrc = Path(_build.find_csrc())
    bare = [f"{path.relative_to(csrc)}:{number}"
            for path in sorted(csrc.rglob("*"))
            if path.suffix in {".h", ".cuh", ".cpp", ".cu"} and path.name != "check.h"
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if re.search(r"\bTORCH_(CHECK|INTERNAL_ASSERT)\w*\s*\(", line)]
    assert not bare, f"use PYG_EDGEDOT_CHECK (csrc/check.h) at {bare}"
    assert "PYG_EDGEDOT_CHECK(" in (csrc / "common.h").read_text()
