"""Shared pytest set-up for the pyrnn_cl test-suite.

``device`` fixture
    Runs the test once per OpenCL device, as a ``pyrnn_cl.devices.Device``
    (``get_device("P:D")``; test ids like ``[0:0-pocl]``). Which devices: ``PYRNN_CL_TEST``, in
    pyopencl's ``PYOPENCL_TEST`` syntax (``"0:0,1;intel:i5"``, ``"oclgrind"``), parsed by
    ``pyrnn_cl.devices.select_devices``; unset: every device the default choice may pick
    (``ranked_devices()``, so Oclgrind and Apple's CPU device only when named). With no such
    device the test is skipped, saying why. A module may define its own ``device`` fixture; it
    then replaces this one.
``needs_fp64(device)`` and ``@pytest.mark.fp64``
    Skip unless the device supports float64 (``cl_khr_fp64``). The marker acts through the
    ``device`` fixture, so it also works on one parameter:
    ``pytest.param(np.float64, marks=pytest.mark.fp64)``. Tests import the helper with
    ``from helpers.device import needs_fp64`` (``tests/helpers/``; pyproject.toml's
    ``pythonpath = ["tests"]`` makes it importable).
``@pytest.mark.torch``
    Needs PyTorch; skipped when torch is not installed.
``@pytest.mark.slow``
    Long tests, left out of CI (``ci/run-tests.sh`` and ``tox -e py3`` run ``-m "not slow"``).
``@pytest.mark.oclgrind`` / ``@pytest.mark.threads``
    Selection marks only (pyproject.toml): small kernel tests that ``tox -e oclgrind`` runs under
    Oclgrind's checkers; tests that enqueue from several threads at once (Oclgrind aborts).
``PYRNN_CL_REQUIRE_DEVICE=1``
    The session fails (exit status 1) when ``pyrnn_cl.programs.launch_count()`` is 0 at the
    end, i.e. no kernel ran on an OpenCL device: a CI run whose device tests all skipped must
    not pass (pitfalls C14). Under pytest-xdist the workers' launches are added up.

Hypothesis runs with ``deadline=None`` (the first call of an op compiles kernels, which takes
longer than Hypothesis' default 200 ms deadline); ``HYPOTHESIS_PROFILE`` picks another profile.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from helpers.device import needs_fp64


def _oclgrind_log_per_worker() -> None:
    """Under pytest-xdist each worker process writes Oclgrind's kernel error log
    (``OCLGRIND_LOG``, set by ci/oclgrind-tests.sh) to a file of its own, ``<log>.<worker>``:
    Oclgrind opens that file for writing, from the start, in each process, so workers sharing
    one file would overwrite each other's reports. Set before any OpenCL context exists."""
    worker, log = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("OCLGRIND_LOG")
    if worker and log and not log.endswith(f".{worker}"):
        os.environ["OCLGRIND_LOG"] = f"{log}.{worker}"


_oclgrind_log_per_worker()


def _device_params() -> list:
    """The ``device`` fixture's parameters: one ``"P:D"`` spec per device to test, or a single
    skipped parameter that says why there is none."""
    try:
        from pyrnn_cl import _env, devices
    except Exception as exc:  # noqa: BLE001 - the tests that import pyrnn_cl report it
        return [pytest.param(None, id="no-device",
                             marks=pytest.mark.skip(reason=f"pyrnn_cl not importable: {exc}"))]
    test_filter = _env.test_filter()
    infos = devices.select_devices(test_filter) if test_filter else devices.ranked_devices()
    if not infos:
        reason = (f"PYRNN_CL_TEST={test_filter!r} matches no OpenCL device" if test_filter
                  else "no OpenCL device. " + devices.INSTALL_HINT)
        return [pytest.param(None, id="no-device", marks=pytest.mark.skip(reason=reason))]
    return [pytest.param(info.index, id=f"{info.index}-{devices.profile_for(info).name}")
            for info in infos]


@pytest.fixture(params=_device_params())
def device(request):
    """One device to test (module docstring); honours ``@pytest.mark.fp64``."""
    from pyrnn_cl.devices import get_device

    dev = get_device(request.param)
    if request.node.get_closest_marker("fp64"):
        needs_fp64(dev)
    return dev


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("torch") is None:
        skip = pytest.mark.skip(reason="torch is not installed (pip install 'pyrnn_cl[torch]')")
        for item in items:
            if item.get_closest_marker("torch"):
                item.add_marker(skip)


def _require_device() -> bool:
    try:
        from pyrnn_cl import _env
    except Exception:  # noqa: BLE001 - a broken package must not hide the check
        return os.environ.get("PYRNN_CL_REQUIRE_DEVICE", "").strip() == "1"
    return _env.require_device()


def _launch_count() -> int:
    try:
        from pyrnn_cl.programs import launch_count
    except Exception:  # noqa: BLE001 - cannot import: nothing can have run
        return 0
    return launch_count()


_failed_no_launch = pytest.StashKey[bool]()
_NO_LAUNCH = ("PYRNN_CL_REQUIRE_DEVICE=1 and no OpenCL kernel ran in this session "
              "(pyrnn_cl.programs.launch_count() == 0): is an OpenCL device installed and "
              "selected? See `pyrnn-cl devices`.")


_worker_launches = pytest.StashKey[int]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist controller: add up the launches each worker reports."""
    config = node.config
    launches = getattr(node, "workeroutput", {}).get("pyrnn_cl_launches", 0)
    config.stash[_worker_launches] = config.stash.get(_worker_launches, 0) + launches


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller decides
        workeroutput["pyrnn_cl_launches"] = _launch_count()
        return
    launches = _launch_count() + session.config.stash.get(_worker_launches, 0)
    ran = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
    if (session.exitstatus not in ran or session.config.option.collectonly
            or not _require_device() or launches > 0):
        return  # interrupted, usage or internal error: pytest's own report says what happened
    session.config.stash[_failed_no_launch] = True
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # Runs after pytest_sessionfinish, before the final counts line.
    if config.stash.get(_failed_no_launch, False):
        terminalreporter.write_sep("=", "FAILED: " + _NO_LAUNCH, red=True, bold=True)


try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is in the 'test' extra; tests that need it import it
    pass
else:
    settings.register_profile("pyrnn_cl", deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pyrnn_cl"))
