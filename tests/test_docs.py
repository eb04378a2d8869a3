"""The documentation's code runs: every ```python block of README.md and docs/*.md is executed
(each in a fresh namespace, on the default OpenCL device), and examples/char_lstm.py trains in
its --quick mode. A block preceded by the line ``<!-- not-tested -->`` is skipped (for
fragments that cannot run alone); blocks that import torch are skipped without torch.
"""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
SKIP_MARK = "<!-- not-tested -->"
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def _blocks():
    out = []
    for path in DOCS:
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[:m.start()].rstrip().splitlines()[-1:] or [""]
            skip = before[0].strip() == SKIP_MARK
            rel = path.relative_to(ROOT).as_posix()
            out.append(pytest.param(rel, line + 1, m.group(1), skip, id=f"{rel}:{line}"))
    return out


BLOCKS = _blocks()


def test_docs_have_python_examples():
    assert any(p.values[0] == "README.md" for p in BLOCKS), "README.md has no ```python block"


@pytest.mark.parametrize("path,line,code,skip", BLOCKS)
def test_doc_code_block_runs(path, line, code, skip):
    if skip:
        pytest.skip(f"{path}:{line} is marked {SKIP_MARK}")
    if re.search(r"^\s*(import|from)\s+torch|pyrnn_cl\.torch", code, re.M):
        pytest.importorskip("torch")
    # line-accurate tracebacks: pad so that line numbers match the Markdown file
    source = "\n" * (line - 1) + code
    namespace = {"__name__": "__doc_example__"}
    exec(compile(source, f"{path}", "exec"), namespace)


def _run_example(*args, pythonpath=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(p) for p in pythonpath] + [str(ROOT)]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, str(ROOT / "examples" / "char_lstm.py"), *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.torch
def test_char_lstm_example_quick(tmp_path):
    """examples/char_lstm.py --quick trains, prints a loss per epoch and a sample, writes the
    PNG (when matplotlib, an optional package, is installed); the loss goes down from the
    uniform guess."""
    pytest.importorskip("torch")
    png = tmp_path / "loss.png"
    have_matplotlib = importlib.util.find_spec("matplotlib") is not None
    t0 = time.perf_counter()
    res = _run_example("--quick", *(["--png", str(png)] if have_matplotlib else []))
    elapsed = time.perf_counter() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    losses = [float(v) for v in re.findall(r"^epoch\s+\d+\s+loss ([0-9.]+)", res.stdout, re.M)]
    assert len(losses) == 2, res.stdout
    uniform = float(re.search(r"uniform guess ([0-9.]+)", res.stdout).group(1))
    assert losses[-1] < uniform, res.stdout
    assert re.search(r"^sample: Alice ", res.stdout, re.M), res.stdout
    if have_matplotlib:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"char_lstm --quick: {elapsed:.1f} s, losses {losses}")


@pytest.mark.torch
def test_char_lstm_example_says_what_to_install_for_png(tmp_path):
    """Without matplotlib (hidden by a stub package that fails to import), --png stops before
    training with the install command, exit status 2 (argparse's)."""
    pytest.importorskip("torch")
    stub = tmp_path / "stub" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('matplotlib hidden by the test')\n")
    res = _run_example("--quick", "--png", str(tmp_path / "loss.png"),
                       pythonpath=[tmp_path / "stub"])
    assert res.returncode == 2, res.stdout + res.stderr
    assert 'pip install "pyrnn_cl[examples]"' in res.stderr
    assert "epoch" not in res.stdout and not (tmp_path / "loss.png").exists()
