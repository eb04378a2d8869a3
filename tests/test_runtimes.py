"""Intel's CPU runtime from PyPI (pyrnn_cl.devices.runtimes): finding it, registering it with the
ICD loader, leaving a user's configuration alone, and one clear warning for a broken install,
on fake prefix directories (the installed runtime is never touched); then the real install
when there is one, and the intel profile's split between the CPU runtime and NEO's GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import pyrnn_cl.devices as devices
from pyrnn_cl.devices import DeviceInfo, profile_for, rank_key, runtimes
from pyrnn_cl.devices.base import TIER_CPU, TIER_INTEL_GPU
from pyrnn_cl.errors import RuntimeInstallWarning

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3/lib/libintelocl.so"
DEPS = [so for so, _ in runtimes.INTEL_DEPENDENCIES]


def fake_prefix(root: Path, *, missing=(), elsewhere=(), library=True) -> dict:
    """A fake install: ``root/lib/libintelocl.so`` and its dependencies (empty files), less
    ``missing``; ``elsewhere`` ones in ``root/other/lib``. Returns ``{(dist, file): path}``,
    what :func:`runtimes._locate` answers."""
    lib, other = root / "lib", root / "other" / "lib"
    lib.mkdir(parents=True)
    other.mkdir(parents=True)
    files = {}
    if library:
        (lib / "libintelocl.so").write_bytes(b"")
    files[(runtimes.INTEL_DIST, "libintelocl.so")] = lib / "libintelocl.so"
    for soname, dist in runtimes.INTEL_DEPENDENCIES:
        if soname in missing:
            continue
        where = other if soname in elsewhere else lib
        (where / soname).write_bytes(b"")
        files[(dist, soname)] = where / soname
    return files


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Install a fake runtime (``fake(missing=..., elsewhere=..., library=...)``), with the
    loader unconfigured, no system ICD, the cache in ``tmp_path`` and this process's real
    registration restored afterwards."""
    monkeypatch.setattr(runtimes, "_DONE", [])
    for name in ("OCL_ICD_VENDORS", "OCL_ICD_FILENAMES", "OPENCL_VENDOR_PATH",
                 "PYRNN_CL_FIND_RUNTIMES", "CL_CONFIG_CPU_TBB_NUM_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYRNN_CL_CACHE_DIR", str(tmp_path / "cache"))
    system = tmp_path / "etc-vendors"
    system.mkdir()
    (system / "pocl.icd").write_text("libpocl.so.2\n")
    monkeypatch.setattr(runtimes, "system_vendor_dirs", lambda: [system])
    monkeypatch.setattr(runtimes, "_cgroup_cpu_limit", lambda: None)
    loaded = []
    monkeypatch.setattr(runtimes.ctypes, "CDLL", lambda path, mode=0: loaded.append(path))

    def install(**kw):
        files = fake_prefix(tmp_path / "prefix", **kw)

        def locate(dist, name):
            if dist == runtimes.INTEL_DIST:
                return files.get((dist, name)), "2026.2.0", True
            path = files.get((dist, name))
            return path, "1", path is not None
        monkeypatch.setattr(runtimes, "_locate", locate)
        return files
    install.system = system
    install.loaded = loaded
    return install


def _register_quietly():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runtimes.register(force=True)
    return result, [w for w in caught if issubclass(w.category, RuntimeInstallWarning)]


# {{{ finding and registering


def test_not_installed_does_nothing(monkeypatch, fake):
    monkeypatch.setattr(runtimes, "_locate", lambda dist, name: (None, None, False))
    assert runtimes.find_intel_runtime() is None
    result, warned = _register_quietly()
    assert result.state == "not-installed" and not warned
    assert "OCL_ICD_VENDORS" not in os.environ


def test_complete_install_is_registered(fake, tmp_path):
    files = fake()
    runtime = runtimes.find_intel_runtime()
    assert runtime.problem() is None and runtime.preload == [] and runtime.missing == []
    result, warned = _register_quietly()
    assert result.state == "registered" and not warned
    vendors = Path(os.environ["OCL_ICD_VENDORS"])
    assert vendors.parent == tmp_path / "cache" / "icd"
    # the loader's own ICDs stay visible, plus one naming the real library (not the
    # placeholder of the wheel's own ICD file)
    assert (vendors / "pocl.icd").read_text() == "libpocl.so.2\n"
    icd = (vendors / runtimes.ICD_NAME).read_text().strip()
    assert icd == str(files[(runtimes.INTEL_DIST, "libintelocl.so")]) and icd != PLACEHOLDER
    # the library was test-loaded; nothing else was preloaded
    assert fake.loaded == [icd]
    # once per process: a second call returns the same result without redoing anything
    assert runtimes.register() is result


def test_dependencies_in_another_prefix_are_preloaded(fake):
    files = fake(elsewhere=("libimf.so", "libtbb.so.12"))
    runtime = runtimes.find_intel_runtime()
    assert runtime.problem() is None
    assert runtime.preload == [files[("intel-cmplr-lib-rt", "libimf.so")],
                               files[("tbb", "libtbb.so.12")]]
    result, warned = _register_quietly()
    assert result.state == "registered" and not warned
    # preloaded (RTLD_GLOBAL) before the library itself
    assert fake.loaded == [str(p) for p in runtime.preload] + [str(runtime.library)]


@pytest.mark.parametrize("missing", [("libimf.so",), ("libsvml.so", "libtbb.so.12")])
def test_missing_library_warns_once_naming_it(fake, missing):
    fake(missing=missing)
    result, warned = _register_quietly()
    assert result.state == "broken"
    assert len(warned) == 1
    message = str(warned[0].message)
    for soname in missing:
        dist = dict(runtimes.INTEL_DEPENDENCIES)[soname]
        assert f"{soname} (package {dist})" in message
    assert "pyrnn_cl[intel]" in message and "other OpenCL devices" in message
    assert "OCL_ICD_VENDORS" not in os.environ     # nothing half-registered
    assert fake.loaded == []
    # memoized: no second warning in the same process
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runtimes.register() is result


def test_missing_libintelocl_warns_naming_its_path(fake):
    files = fake(library=False)
    result, warned = _register_quietly()
    assert result.state == "broken" and len(warned) == 1
    assert str(files[(runtimes.INTEL_DIST, "libintelocl.so")]) in str(warned[0].message)


def test_library_that_fails_to_load_warns_with_the_loader_message(fake, monkeypatch):
    fake()

    def cdll(path, mode=0):
        raise OSError("libcommon_clang.so.2026.22.10.0: cannot open shared object file")
    monkeypatch.setattr(runtimes.ctypes, "CDLL", cdll)
    result, warned = _register_quietly()
    assert result.state == "broken" and len(warned) == 1
    assert "libcommon_clang.so.2026.22.10.0" in str(warned[0].message)
    assert "OCL_ICD_VENDORS" not in os.environ


def test_discovery_error_never_escapes(fake, monkeypatch):
    def boom():
        raise PermissionError("site-packages unreadable")
    monkeypatch.setattr(runtimes, "find_intel_runtime", boom)
    result, warned = _register_quietly()
    assert result.state == "broken" and len(warned) == 1
    assert "site-packages unreadable" in str(warned[0].message)


@pytest.mark.parametrize("name", ["OCL_ICD_VENDORS", "OCL_ICD_FILENAMES", "OPENCL_VENDOR_PATH"])
def test_user_configured_loader_is_left_alone(fake, monkeypatch, tmp_path, name):
    fake()
    monkeypatch.setenv(name, str(tmp_path / "mine"))
    result, warned = _register_quietly()
    assert result.state == "user-configured" and not warned
    assert os.environ[name] == str(tmp_path / "mine")
    assert fake.loaded == []
    if name != "OCL_ICD_VENDORS":
        assert "OCL_ICD_VENDORS" not in os.environ


@pytest.mark.parametrize("as_file", [False, True])
def test_user_loader_pointing_at_a_wrong_icd_path_warns(fake, monkeypatch, tmp_path, as_file):
    """OCL_ICD_VENDORS at the wheel's own vendors directory (its ICD names conda's
    placeholder): left as set, with one warning naming the ICD file, the missing path and where
    the library is."""
    files = fake()
    wheel = tmp_path / "prefix" / "etc" / "OpenCL" / "vendors"
    wheel.mkdir(parents=True)
    (wheel / "intel-cpu.icd").write_text(PLACEHOLDER + "\n")
    given = wheel / "intel-cpu.icd" if as_file else wheel
    monkeypatch.setenv("OCL_ICD_VENDORS", str(given))
    result, warned = _register_quietly()
    assert result.state == "user-configured" and os.environ["OCL_ICD_VENDORS"] == str(given)
    assert len(warned) == 1
    message = str(warned[0].message)
    assert str(wheel / "intel-cpu.icd") in message and PLACEHOLDER in message
    assert str(files[(runtimes.INTEL_DIST, "libintelocl.so")]) in message
    # once a working ICD sits beside it, nothing to say
    (wheel / "fixed.icd").write_text(f"{files[(runtimes.INTEL_DIST, 'libintelocl.so')]}\n")
    if not as_file:
        result, warned = _register_quietly()
        assert result.state == "user-configured" and not warned


def test_switched_off(fake, monkeypatch):
    fake()
    monkeypatch.setenv("PYRNN_CL_FIND_RUNTIMES", "0")
    result, _ = _register_quietly()
    assert result.state == "off" and "OCL_ICD_VENDORS" not in os.environ


def test_other_systems_are_left_alone(fake, monkeypatch):
    fake()
    monkeypatch.setattr(runtimes.sys, "platform", "win32")
    result, warned = _register_quietly()
    assert result.state == "off" and "win32" in result.detail and not warned
    assert "OCL_ICD_VENDORS" not in os.environ


def test_inherited_registration_is_recognised(fake, monkeypatch):
    files = fake()
    first, _ = _register_quietly()
    vendors = os.environ["OCL_ICD_VENDORS"]
    # a child process sees the variable set: not the user's choice, but ours
    second, warned = _register_quietly()
    assert first.state == second.state == "registered" and not warned
    assert "inherited" in second.detail and os.environ["OCL_ICD_VENDORS"] == vendors
    assert files


def test_a_working_system_icd_wins(fake, tmp_path):
    files = fake()
    real = files[(runtimes.INTEL_DIST, "libintelocl.so")]
    (fake.system / "intel-cpu.icd").write_text(f"{real}\n")
    result, warned = _register_quietly()
    assert result.state == "system" and not warned
    assert "OCL_ICD_VENDORS" not in os.environ


def test_placeholder_and_emulator_icds_do_not_count(tmp_path):
    d = tmp_path / "vendors"
    d.mkdir()
    (d / "intel-cpu.icd").write_text(PLACEHOLDER + "\n")          # the wheel's own, unrewritten
    (d / "intel-fpga_emu.icd").write_text("libintelocl_emu.so\n")
    (d / "notes.txt").write_text("libintelocl.so\n")                # not an .icd file
    assert runtimes.registered_intel_icd([d]) is None
    (d / "system.icd").write_text("libintelocl.so\n")               # a bare name: ld.so finds it
    assert runtimes.registered_intel_icd([d]) == d / "system.icd"


def test_vendors_directory_is_content_addressed(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "pocl.icd").write_text("libpocl.so.2\n\n")
    lib = tmp_path / "libintelocl.so"
    first = runtimes.write_vendors_dir(lib, [base], root=tmp_path / "icd")
    again = runtimes.write_vendors_dir(lib, [base], root=tmp_path / "icd")
    assert first == again
    assert sorted(p.name for p in first.iterdir()) == ["pocl.icd", runtimes.ICD_NAME]
    # no temporary directories left behind
    assert [p.name for p in (tmp_path / "icd").iterdir()] == [first.name]
    (base / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    assert runtimes.write_vendors_dir(lib, [base], root=tmp_path / "icd") != first


# }}}

# {{{ threads


def test_thread_default_only_under_a_cgroup_quota(fake, monkeypatch):
    fake()
    monkeypatch.setattr(runtimes, "_usable_cpus", lambda: 8)
    monkeypatch.setattr(runtimes, "_cgroup_cpu_limit", lambda: 1.5)
    result, _ = _register_quietly()
    assert result.thread_defaults == {"CL_CONFIG_CPU_TBB_NUM_WORKERS": "2"}
    assert os.environ["CL_CONFIG_CPU_TBB_NUM_WORKERS"] == "2"
    report = runtimes.thread_settings()
    assert report["variables"]["CL_CONFIG_CPU_TBB_NUM_WORKERS"] == "2"
    assert report["set_by_pyrnn_cl"] == {"CL_CONFIG_CPU_TBB_NUM_WORKERS": "2"}


def test_thread_default_never_overrides_the_user(fake, monkeypatch):
    fake()
    monkeypatch.setattr(runtimes, "_usable_cpus", lambda: 8)
    monkeypatch.setattr(runtimes, "_cgroup_cpu_limit", lambda: 1.5)
    monkeypatch.setenv("CL_CONFIG_CPU_TBB_NUM_WORKERS", "6")
    result, _ = _register_quietly()
    assert result.thread_defaults == {}
    assert os.environ["CL_CONFIG_CPU_TBB_NUM_WORKERS"] == "6"


def test_no_thread_default_without_a_quota(fake, monkeypatch):
    fake()
    monkeypatch.setattr(runtimes, "_usable_cpus", lambda: 2)
    for limit in (None, 2.0, 4.0):
        monkeypatch.setattr(runtimes, "_cgroup_cpu_limit", lambda limit=limit: limit)
        assert runtimes.thread_defaults() == {}
    assert "CL_CONFIG_CPU_TBB_NUM_WORKERS" not in os.environ


# }}}

# {{{ a broken install in a fresh process: import works, the other devices are listed


def test_broken_install_in_a_fresh_process_keeps_other_devices(tmp_path):
    """A fresh interpreter whose Intel install lacks libimf.so: one warning naming it, and the
    devices listed are those of the loader's own ICDs (the same as with the search off)."""
    files = fake_prefix(tmp_path / "prefix", missing=("libimf.so",))
    table = {f"{d}|{n}": str(p) for (d, n), p in files.items()}
    script = textwrap.dedent(f"""
        import warnings
        from pathlib import Path
        import pyrnn_cl
        from pyrnn_cl.devices import runtimes, list_devices
        table = {table!r}
        def locate(dist, name):
            path = table.get(dist + "|" + name)
            return (Path(path) if path else None), "2026.2.0", True
        runtimes._locate = locate
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            names = sorted(i.platform_name for i in list_devices())
        print("WARN", len(caught), caught[0].category.__name__ if caught else "",
              str(caught[0].message) if caught else "")
        print("PLATFORMS", names)
        print("STATE", runtimes.registration().state)
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OCL_ICD_VENDORS", "OCL_ICD_FILENAMES", "OPENCL_VENDOR_PATH",
                        "PYRNN_CL_FIND_RUNTIMES")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    out = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    assert out["WARN"].startswith("1 RuntimeInstallWarning"), res.stdout
    assert "libimf.so (package intel-cmplr-lib-rt)" in out["WARN"]
    assert out["STATE"] == "broken"
    off = subprocess.run([sys.executable, "-c", "from pyrnn_cl.devices import list_devices; "
                          "print(sorted(i.platform_name for i in list_devices()))"],
                         capture_output=True, text=True, timeout=120,
                         env=dict(env, PYRNN_CL_FIND_RUNTIMES="0"))
    assert off.returncode == 0, off.stderr
    assert out["PLATFORMS"] == off.stdout.strip()


def test_pocl_workers_pinned_by_default(monkeypatch):
    """POCL_AFFINITY=1 unless the user set it (even empty), PYRNN_CL_PIN_POCL is a false word,
    or the process's CPU set lacks one of the CPUs 0..n-1 of PoCL's n workers
    (POCL_MAX_PTHREAD_COUNT, else one per CPU)."""
    env: dict = {}
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert runtimes.pocl_thread_defaults() == {"POCL_AFFINITY": "1"}
    assert env == {"POCL_AFFINITY": "1"}
    assert runtimes.pocl_thread_defaults() == {}                # set once
    for user in ("", "0"):                                      # the user's choice stays
        env.clear()
        env["POCL_AFFINITY"] = user
        assert runtimes.pocl_thread_defaults() == {} and env == {"POCL_AFFINITY": user}
    env.clear()
    env["PYRNN_CL_PIN_POCL"] = "off"
    assert runtimes.pocl_thread_defaults() == {} and "POCL_AFFINITY" not in env
    env.clear()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})   # 4 CPUs, 2 allowed
    assert runtimes.pocl_thread_defaults() == {} and env == {}
    env["POCL_MAX_PTHREAD_COUNT"] = "x2"                       # not a count: one per CPU
    assert runtimes.pocl_thread_defaults() == {} and "POCL_AFFINITY" not in env
    env["POCL_MAX_PTHREAD_COUNT"] = "2"                        # two workers on CPUs 0 and 1
    assert runtimes.pocl_thread_defaults() == {"POCL_AFFINITY": "1"}
    env.clear()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3})
    assert runtimes.pocl_thread_defaults(2) == {} and env == {}
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"workers: got {bad}, expected a value >= 1"):
            runtimes.pocl_thread_defaults(bad)
    assert env == {}


def test_first_device_query_pins_pocl_workers():
    """A fresh process's first device query sets POCL_AFFINITY=1 (where its CPU set holds
    CPUs 0..n-1), before PoCL reads it; PYRNN_CL_PIN_POCL=0 and a POCL_AFFINITY of the user's
    leave it alone."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("POCL_AFFINITY", "PYRNN_CL_PIN_POCL", "POCL_MAX_PTHREAD_COUNT")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    script = ("import os; from pyrnn_cl.devices import list_devices; list_devices(); "
              "print(os.environ.get('POCL_AFFINITY'))")

    def affinity(**extra):
        res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=dict(env, **extra), timeout=120)
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()

    allowed = set(range(os.cpu_count() or 1)) <= os.sched_getaffinity(0)
    assert affinity() == ("1" if allowed else "None")
    assert affinity(PYRNN_CL_PIN_POCL="0") == "None"
    assert affinity(POCL_AFFINITY="0") == "0"


# }}}

# {{{ the real install, when there is one


def _installed():
    runtime = runtimes.find_intel_runtime()
    if runtime is None:
        pytest.skip('Intel\'s CPU runtime is not installed (pip install "pyrnn_cl[intel]")')
    return runtime


def test_installed_runtime_is_complete_and_listed():
    runtime = _installed()
    assert runtime.problem() is None, runtime.problem()
    devices.list_devices()             # registers, if nothing did yet
    state = runtimes.registration()
    assert state is not None and state.state in {"registered", "system", "user-configured",
                                                 "off"}, state
    if state.state in ("user-configured", "off"):
        pytest.skip(f"the search is off or the ICD loader is the user's: {state.detail}")
    intel_cpus = [i for i in devices.list_devices()
                  if i.platform_name == "Intel(R) OpenCL" and i.type == "cpu"]
    assert intel_cpus, [i.platform_name for i in devices.list_devices()]
    assert profile_for(intel_cpus[0]).name == "intel"


# }}}

# {{{ the intel profile: CPU runtime and NEO apart

INTEL_GPU = DeviceInfo(platform_name="Intel(R) OpenCL Graphics",
                       platform_vendor="Intel(R) Corporation", name="Intel(R) Arc(TM) A770",
                       type="gpu", platform_index=0, device_index=0)
INTEL_CPU = DeviceInfo(platform_name="Intel(R) OpenCL", platform_vendor="Intel(R) Corporation",
                       name="AMD EPYC", type="cpu", platform_index=1, device_index=0)
POCL_CPU = DeviceInfo(platform_name="Portable Computing Language",
                      platform_vendor="The pocl project", name="pthread-haswell-AMD EPYC",
                      platform_version="OpenCL 3.0 PoCL 3.1+debian", type="cpu",
                      platform_index=2, device_index=0)


def test_intel_profile_tells_cpu_runtime_from_gpus():
    profile = profile_for(INTEL_CPU)
    assert profile is profile_for(INTEL_GPU) and profile.name == "intel"
    assert profile.is_cpu_runtime(INTEL_CPU) and not profile.is_cpu_runtime(INTEL_GPU)
    assert rank_key(INTEL_GPU)[0][0] == TIER_INTEL_GPU
    assert rank_key(INTEL_CPU)[0][0] == TIER_CPU
    # no GPU table reaches the CPU runtime: its values are derived from its queries, but for
    # its one measured starting point (no pack for a crossing vector: it gathers it cheaply)
    for family in ("gemm", "gemm_f64"):
        assert profile.table_tuning(INTEL_CPU, family) == {"GEMM_PACK_EDGE": 0}
    for family in ("reduce", "recurrence"):
        assert profile.table_tuning(INTEL_CPU, family) == {}


def test_pocl_ranks_before_intel_cpu_and_devices_says_why(monkeypatch, capsys):
    assert devices.ranked_devices([INTEL_CPU, POCL_CPU]) == [POCL_CPU, INTEL_CPU]
    assert devices.select_devices("intel", [INTEL_CPU, POCL_CPU]) == [INTEL_CPU]
    from pyrnn_cl import cli

    class Default:
        info = POCL_CPU
    monkeypatch.setattr(devices, "list_devices", lambda: [POCL_CPU, INTEL_CPU])
    monkeypatch.setattr(devices, "get_device", lambda: Default)
    monkeypatch.delenv("PYRNN_CL_DEVICE", raising=False)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "Ranking of the CPU runtimes: PoCL ranks before Intel's CPU runtime" in out
    # one CPU runtime only: no ranking note
    monkeypatch.setattr(devices, "list_devices", lambda: [POCL_CPU])
    assert cli.main(["devices"]) == 0
    assert "Ranking of the CPU runtimes" not in capsys.readouterr().out

# }}}


# {{{ pyrnn-cl bench reports the runtime's thread controls


def test_bench_reports_intel_thread_controls(device, monkeypatch):
    from pyrnn_cl import bench

    monkeypatch.setenv("DPCPP_CPU_SCHEDULE", "static")
    result = bench.run_bench([bench.BenchConfig("smoke", "lstm", H=8, I=4, N=2, T=3)],
                             device=device, repeat=1, warmup=0, threads=1,
                             compare_torch=False)
    report = result["machine"]["intel_cpu_runtime"]
    assert set(report["variables"]) == set(runtimes.THREAD_VARIABLES)
    assert report["variables"]["DPCPP_CPU_SCHEDULE"] == "static"
    assert report["process_cpus"] >= 1
    header = bench.format_table(result).splitlines()[:4]
    if device.info.platform_name == "Intel(R) OpenCL":
        line = next(x for x in header if x.startswith("Intel CPU runtime threads: "))
        assert "DPCPP_CPU_SCHEDULE=static" in line and "CL_CONFIG_CPU_TBB_NUM_WORKERS=" in line
    else:
        assert not any("Intel CPU runtime" in x for x in header)

# }}}
