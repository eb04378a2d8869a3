"""Optional packages (torch, matplotlib, tqdm, onnx) missing: a message naming what to install,
never a traceback.

Each case runs in a fresh interpreter where the package cannot be imported:
``sys.modules[name] = None`` makes every ``import name`` raise ``ImportError``, as on a machine
where it is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_without(packages, code: str, *args: str, timeout: float = 120, **env_extra):
    """Run ``code`` (or the script path ``code`` when it ends in .py) with ``packages``
    unimportable and ``env_extra`` in the environment; returns the CompletedProcess."""
    block = "import sys\n" + "".join(f"sys.modules[{p!r}] = None\n" for p in packages)
    if code.endswith(".py"):
        body = (f"sys.argv = [{code!r}, *{list(args)!r}]\n"
                f"import runpy\nrunpy.run_path({code!r}, run_name='__main__')\n")
    else:
        body = textwrap.dedent(code)
    env = dict(os.environ, **env_extra,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", block + body], env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=ROOT)


def assert_message_not_traceback(done, *needles):
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


def test_pyrnn_cl_imports_without_torch_and_the_bridge_says_what_to_install():
    done = run_without(["torch"], """
        import pyrnn_cl
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
        try:
            import pyrnn_cl.torch
        except ImportError as exc:
            print("MESSAGE:", exc)
        else:
            raise SystemExit("pyrnn_cl.torch imported without torch")
    """)
    assert done.returncode == 0, done.stderr
    assert 'pip install "pyrnn_cl[torch]"' in done.stdout, done.stdout


def test_bench_png_without_matplotlib_stops_before_running():
    done = run_without(["matplotlib"], """
        from pyrnn_cl import bench
        sys.exit(bench.main(["--quick", "--png", "out.png", "--no-torch"]))
    """, timeout=60)
    assert done.returncode == 2
    assert_message_not_traceback(done, "--png needs matplotlib", 'pip install "pyrnn_cl[examples]"')
    assert "GFLOP" not in done.stdout  # nothing was measured


def test_bench_without_torch_says_there_is_no_torch_column():
    # --repeat 0 is refused right after the optional-package checks: nothing runs
    done = run_without(["torch"], """
        from pyrnn_cl import bench
        sys.exit(bench.main(["--quick", "--repeat", "0"]))
    """)
    assert done.returncode == 2
    assert_message_not_traceback(done, "PyTorch is not installed", 'pip install "pyrnn_cl[torch]"')


def test_progress_without_tqdm_prints_plain_lines():
    done = run_without(["tqdm"], """
        from pyrnn_cl import bench, tuner
        bar = bench._Progress(2, enabled=True)
        bar.start("first"); bar.step(); bar.close()
        tbar = tuner._Bar(10.0, enabled=True)
        tbar.update("trying"); tbar.close()
    """)
    assert done.returncode == 0, done.stderr
    assert "[1/2] first" in done.stderr and "trying" in done.stderr


@pytest.mark.parametrize("missing, args, needles", [
    (["matplotlib"], ["--png", "{tmp}/loss.png", "--quick"],
     ["--png needs matplotlib", 'pip install "pyrnn_cl[examples]"']),
    (["torch"], ["--quick"], ["needs PyTorch", 'pip install "pyrnn_cl[torch,examples]"']),
], ids=["no-matplotlib", "no-torch"])
def test_char_lstm_example_without_optional_packages(missing, args, needles, tmp_path):
    if "torch" not in missing:
        pytest.importorskip("torch")  # the example checks for torch first
    args = [a.format(tmp=tmp_path) for a in args]
    done = run_without(missing, str(ROOT / "examples" / "char_lstm.py"), *args)
    assert_message_not_traceback(done, *needles)
    assert "epoch" not in done.stdout  # it stopped before training
    assert not (tmp_path / "loss.png").exists()


def test_onnx_cross_checks_skip_with_a_reason_without_onnx():
    done = run_without(["onnx"], """
        import pytest
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs",
                              "tests/test_external_onnx.py"]))
    """, timeout=300, PYRNN_CL_REQUIRE_DEVICE="0")  # no kernel runs in that session
    # 5: pytest's "no tests ran", the module being skipped as a whole
    assert done.returncode in (0, 5), done.stdout + done.stderr
    assert "SKIPPED" in done.stdout and "onnx" in done.stdout, done.stdout
