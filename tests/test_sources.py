"""Source loading: include expansion (each file once), #line markers, the sorted define block."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pyrnn_cl import sources


@pytest.fixture
def tree(tmp_path):
    """A small source tree:  main.cl -> sub/a.h -> sub/c.h,  main.cl -> b.h -> sub/a.h."""
    (tmp_path / "sub").mkdir()
    files = {
        "main.cl": '#include "sub/a.h"\n#include "b.h"  // comment\nMAIN\n#include "sub/a.h"\n'
                   "END\n",
        "sub/a.h": 'A1\n#include "c.h"\nA2\n',
        "sub/c.h": "C\n",
        "b.h": 'B\n  #  include "sub/a.h"\n',
        "loop.cl": '#include "loop.cl"\nLOOP\n',
        "missing.cl": '#include "nowhere.h"\n',
        "odd.cl": '#include "b.h"   /* a comment over\n * two lines */\n',
        "angled.cl": "#include <b.h>\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def code_lines(text):
    """The lines of ``text`` that are neither markers nor comments."""
    return [line for line in text.splitlines()
            if line and not line.startswith("#line") and not line.startswith("/*")]


def test_includes_expand_once_in_order(tree):
    text, files = sources.expand_includes("main.cl", tree)
    assert code_lines(text) == ["A1", "C", "A2", "B", "MAIN", "END"]
    assert files == ("main.cl", "sub/a.h", "sub/c.h", "b.h")
    assert text.count('already included */') == 2


def test_line_markers_point_back_to_files(tree):
    text, _ = sources.expand_includes("main.cl", tree)
    current, line_no = None, 0
    origin = {}
    for line in text.splitlines():
        marker = re.match(r'#line (\d+) "([^"]+)"', line)
        if marker:
            line_no, current = int(marker.group(1)), marker.group(2)
            continue
        origin[line] = (current, line_no)
        line_no += 1
    assert origin["A2"] == ("sub/a.h", 3)
    assert origin["C"] == ("sub/c.h", 1)
    assert origin["MAIN"] == ("main.cl", 3)
    assert origin["END"] == ("main.cl", 5)


def test_self_include_and_missing_include(tree):
    text, _ = sources.expand_includes("loop.cl", tree)
    assert code_lines(text) == ["LOOP"]
    with pytest.raises(FileNotFoundError, match="nowhere.h"):
        sources.expand_includes("missing.cl", tree)
    with pytest.raises(FileNotFoundError, match="absent.cl"):
        sources.build_source("absent.cl", source_dir=tree)


@pytest.mark.parametrize("name", ["odd.cl", "angled.cl"])
def test_include_the_loader_cannot_inline_is_refused(tree, name):
    """An #include line the loader does not inline would reach the compiler, which finds the
    file on some implementations (PoCL) and not on others (Oclgrind): refused here, naming the
    file and line."""
    with pytest.raises(ValueError, match=rf"{name}:1: an #include this loader cannot inline"):
        sources.expand_includes(name, tree)


def test_define_block_is_sorted_and_typed():
    block = sources.define_block({"ZETA": 3, "ALPHA": "foo(x)", "MID": True, "N": np.int64(7)})
    assert block.splitlines() == [
        "#define ALPHA foo(x)", "#define MID 1", "#define N 7", "#define ZETA 3"]
    assert sources.define_block({}) == sources.define_block(None) == ""
    with pytest.raises(TypeError, match="kernel arguments"):
        sources.define_block({"X": 0.5})
    with pytest.raises(ValueError):
        sources.define_block({"not an identifier": 1})
    with pytest.raises(ValueError):
        sources.define_block({"X": "a\nb"})


def test_float64_adds_the_pragma():
    block = sources.define_block({"PYRNN_DTYPE": sources.DTYPE_FLOAT64, "B": 1})
    lines = block.splitlines()
    assert lines[0] == "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"
    assert lines[1:] == ["#define B 1", "#define PYRNN_DTYPE 2"]
    assert "fp64" not in sources.define_block({"PYRNN_DTYPE": sources.DTYPE_FLOAT32})
    assert sources.dtype_code(np.float32) == 1 and sources.dtype_code("float64") == 2
    assert sources.dtype_code(np.float16) == 3
    assert sources.compute_dtype(np.float16) == np.float32
    assert sources.compute_dtype(np.float64) == np.float64
    with pytest.raises(TypeError, match="int32"):
        sources.dtype_code(np.int32)


def test_build_source_is_deterministic(tree):
    one = sources.build_source("main.cl", {"B": 2, "A": 1}, tree)
    two = sources.build_source("main.cl", {"A": 1, "B": 2}, [tree])
    assert one == two
    assert one.index("#define A 1") < one.index("#define B 2") < one.index('#line 1 "main.cl"')


def test_package_sources_load():
    text = sources.build_source("selfcheck.cl", {"PYRNN_DTYPE": 1})
    assert "__kernel void pyrnn_axpy" in text and '#line 1 "selfcheck.cl"' in text
    assert sources.read_source("selfcheck.cl").startswith("/* selfcheck.cl")
    assert sources.CL_DIR.is_dir()
