"""Device layer: profile matching, default ranking, spec parsing, environment precedence and
error messages on hand-written DeviceInfos (no OpenCL needed), then the real device if any."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import pyrnn_cl.devices as devices
from pyrnn_cl.devices import (
    Device,
    DeviceInfo,
    VendorProfile,
    get_device,
    list_devices,
    profile_for,
    rank_key,
    ranked_devices,
    register_profile,
    resolve_device,
    select_devices,
    set_default_device,
    unregister_profile,
)
from pyrnn_cl.devices.info import parse_version
from pyrnn_cl.errors import ConfigurationError, DeviceNotFoundError, UnsupportedError

FP64 = ("cl_khr_fp64",)


def make(p_index, d_index, platform, name, type_, *, vendor="", platform_vendor="",
         platform_version="OpenCL 3.0", extensions=FP64, **kw):
    return DeviceInfo(
        platform_name=platform, platform_vendor=platform_vendor or platform,
        platform_version=platform_version, name=name, vendor=vendor or platform_vendor,
        type=type_, extensions=extensions, opencl_c_version="OpenCL C 1.2",
        platform_index=p_index, device_index=d_index, **kw)


# A zoo of devices as their runtimes describe themselves.
APPLE_GPU = make(0, 0, "Apple", "Apple M2 Max", "gpu", vendor="Apple", extensions=(),
                 platform_version="OpenCL 1.2 (Jun 23 2023 20:24:19)")
APPLE_CPU = make(0, 1, "Apple", "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz", "cpu",
                 vendor="Intel", platform_version="OpenCL 1.2 (Jun 23 2023 20:24:19)")
AMD_GPU = make(1, 0, "AMD Accelerated Parallel Processing", "gfx1030", "gpu",
               platform_vendor="Advanced Micro Devices, Inc.")
NVIDIA_GPU = make(2, 0, "NVIDIA CUDA", "NVIDIA GeForce RTX 3080", "gpu",
                  platform_vendor="NVIDIA Corporation", extensions=FP64 + ("cl_nv_pragma_unroll",))
INTEL_GPU = make(3, 0, "Intel(R) OpenCL Graphics", "Intel(R) UHD Graphics 770", "gpu",
                 platform_vendor="Intel(R) Corporation", extensions=())
INTEL_CPU = make(4, 0, "Intel(R) OpenCL", "12th Gen Intel(R) Core(TM) i7-12700", "cpu",
                 platform_vendor="Intel(R) Corporation")
POCL_DEBIAN = make(5, 0, "Portable Computing Language", "pthread-skylake-avx512-AMD EPYC", "cpu",
                   platform_vendor="The pocl project", vendor="AuthenticAMD",
                   platform_version="OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, "
                                    "SPIR, LLVM 15.0.6, SLEEF, DISTRO, POCL_DEBUG")
POCL_PIP = make(6, 0, "Portable Computing Language", "cpu-x86-64-AMD EPYC", "cpu",
                platform_vendor="The pocl project", vendor="AuthenticAMD",
                platform_version="OpenCL 3.0 PoCL 6.0  Linux, Release, RELOC, SPIR-V, "
                                 "LLVM 18.1.8, SLEEF, DISTRO, POCL_DEBUG")
POCL_CUDA = make(5, 1, "Portable Computing Language", "NVIDIA GeForce RTX 3080", "gpu",
                 platform_vendor="The pocl project", vendor="NVIDIA Corporation",
                 platform_version="OpenCL 3.0 PoCL 3.1+debian  Linux, CUDA")
OCLGRIND = make(7, 0, "Oclgrind", "Oclgrind Simulator", "cpu",
                platform_vendor="University of Bristol")
RUSTICL = make(8, 0, "rusticl", "AMD Radeon RX 6800 (radeonsi, navi21, LLVM 17.0.6)", "gpu",
               platform_vendor="Mesa/X.org", vendor="AMD")
ZOO = [APPLE_GPU, APPLE_CPU, AMD_GPU, NVIDIA_GPU, INTEL_GPU, INTEL_CPU, POCL_DEBIAN, POCL_PIP,
       POCL_CUDA, OCLGRIND, RUSTICL]


def _id(value):
    """Readable test ids: a DeviceInfo shows as its name."""
    return value.name if isinstance(value, DeviceInfo) else repr(value)


@pytest.fixture(autouse=True)
def _fresh_device_memo(monkeypatch):
    """Each test starts and ends with no memoized device and a clean environment."""
    for name in ("PYRNN_CL_DEVICE", "PYOPENCL_CTX", "PYRNN_CL_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    devices.clear_cache()
    yield
    devices.clear_cache()


@pytest.fixture
def fake_platforms(monkeypatch):
    """Make the device layer see ``infos`` instead of the real platforms; Devices get stand-in
    contexts and queues, so no OpenCL call is made."""
    def install(infos):
        found = [(info, types.SimpleNamespace(int_ptr=1000 + n)) for n, info in enumerate(infos)]
        monkeypatch.setattr(devices, "_enumerate", lambda: list(found))
        monkeypatch.setattr(
            devices, "_open_device",
            lambda cl_device, info: Device(cl_device, context=object(), queue=object(), info=info))
    return install


# {{{ DeviceInfo


def test_device_info_derives_fp_flags_and_tolerates_types():
    info = DeviceInfo("P", extensions="cl_khr_fp16 cl_khr_fp64", type="weird")
    assert info.has_fp64 and info.has_fp16
    assert info.extensions == ("cl_khr_fp16", "cl_khr_fp64")
    assert info.type == "other"
    assert DeviceInfo("P", extensions=("cl_khr_fp64",), has_fp64=False).has_fp64 is False
    assert hash(APPLE_GPU) == hash(dataclasses.replace(APPLE_GPU))
    with pytest.raises(dataclasses.FrozenInstanceError):
        APPLE_GPU.name = "x"


def test_device_info_from_cl_is_tolerant():
    import pyopencl as cl

    def broken():
        raise cl.LogicError("no")

    platform = types.SimpleNamespace(name="Fake", vendor="V", version="OpenCL 1.2")
    fake = types.SimpleNamespace(
        platform=platform, name=" Dev ", vendor="V", version="OpenCL 1.2", driver_version="1",
        type=int(cl.device_type.GPU | cl.device_type.DEFAULT), max_compute_units=4,
        global_mem_size=2**30, local_mem_size=2**15, max_work_group_size=256,
        extensions="cl_khr_fp64 ", opencl_c_version="OpenCL C 1.2 ")
    info = DeviceInfo.from_cl(fake, 0, 1)
    assert (info.name, info.type, info.has_fp64, info.index) == ("Dev", "gpu", True, "0:1")
    odd = types.SimpleNamespace(**{**vars(fake), "type": property(broken)})
    del odd.type  # accessing .type raises AttributeError: classified as "other"
    info = DeviceInfo.from_cl(odd)
    assert info.type == "other" and info.index == "?:?"


def test_parse_version():
    assert parse_version(POCL_DEBIAN.platform_version, "PoCL") == (3, 1)
    assert parse_version(POCL_PIP.platform_version, "LLVM") == (18, 1, 8)
    assert parse_version("nothing", "PoCL") == ()
    assert DeviceInfo("P").opencl_c_version_tuple == (1, 2)

# }}}

# {{{ profiles and ranking


@pytest.mark.parametrize("info, expected", [
    (APPLE_GPU, "apple"), (APPLE_CPU, "apple"), (AMD_GPU, "amd"), (NVIDIA_GPU, "nvidia"),
    (INTEL_GPU, "intel"), (INTEL_CPU, "intel"), (POCL_DEBIAN, "pocl"), (POCL_PIP, "pocl"),
    (POCL_CUDA, "pocl"), (OCLGRIND, "generic"), (RUSTICL, "generic"),
], ids=_id)
def test_profile_matching(info, expected):
    assert profile_for(info).name == expected


def test_default_ranking_order():
    order = ranked_devices(ZOO)
    assert order[:2] == [AMD_GPU, NVIDIA_GPU]  # same tier: platform index decides
    assert order[2:] == [APPLE_GPU, INTEL_GPU, POCL_CUDA, RUSTICL, POCL_DEBIAN, POCL_PIP,
                         INTEL_CPU]
    # Never chosen by default: Apple's CPU device and Oclgrind.
    assert rank_key(APPLE_CPU) is None and rank_key(OCLGRIND) is None


def test_two_pocl_installs_prefer_the_distribution_build():
    assert ranked_devices([POCL_PIP, POCL_DEBIAN]) == [POCL_DEBIAN, POCL_PIP]
    newer = dataclasses.replace(POCL_DEBIAN, platform_index=9,
                                platform_version=POCL_DEBIAN.platform_version.replace("3.1", "5.0"))
    assert ranked_devices([POCL_DEBIAN, newer])[0] == newer  # within a group: newer PoCL


def test_profile_quirks_and_options():
    nvidia, apple, pocl = (profile_for(i) for i in (NVIDIA_GPU, APPLE_GPU, POCL_DEBIAN))
    assert nvidia.simd_width == 32 and not NVIDIA_GPU.has_fp16
    assert apple.simd_width == 32 and not APPLE_GPU.has_fp64
    assert pocl.prefers_explicit_vectors and pocl.specialises_per_local_size
    for info in ZOO:
        options = profile_for(info).build_options(info)
        assert "-cl-std=CL1.2" in options
        assert not any("fast-relaxed" in o for o in options)
    old = dataclasses.replace(OCLGRIND, opencl_c_version="OpenCL C 1.1")
    assert profile_for(old).build_options(old) == []


def test_free_launches_take_a_fixed_few_local_sizes_where_each_is_a_compile():
    """PoCL compiles a work-group function per local size: a launch that needs no particular
    one gets a power of two (at most FIXED_LOCAL_MAX) dividing its first dimension, 1 in the
    others; other implementations pick their own (None)."""
    pocl, nvidia, intel = (profile_for(i) for i in (POCL_DEBIAN, NVIDIA_GPU, INTEL_CPU))
    top = pocl.FIXED_LOCAL_MAX
    assert pocl.local_size((12, 5, 3)) == (4, 1, 1)
    assert pocl.local_size((33, 64)) == (1, 1)
    assert pocl.local_size((7 * top * 4,)) == (top,)
    assert pocl.local_size((0, 3)) == (1, 1)
    sizes = {pocl.local_size((g, 7)) for g in range(1, 5000)}
    assert sizes == {(1 << i, 1) for i in range(top.bit_length())}
    assert nvidia.local_size((12, 5, 3)) is None and intel.local_size((64,)) is None


def test_benign_log_lines_are_filtered():
    log = ("Function pyrnn_fwd is a kernel, so overriding noinline attribute. The function may "
           "be inlined when called.\n\nwarning: real problem\n")
    assert profile_for(NVIDIA_GPU).filter_log(log) == "warning: real problem"
    intel_log = ("Compilation started\nCompilation done\n"
                 "Kernel <k> was successfully vectorized (8)\nDone.")
    assert profile_for(INTEL_CPU).filter_log(intel_log) == ""
    assert profile_for(POCL_DEBIAN).filter_log(" \n") == ""


def test_profile_table_chain():
    class Vendor(VendorProfile):
        name = "testvendor"
        TUNING = {
            "default": {"gemm": {"GEMM_WG": 32}, "extra": {"X": 1}},
            "Turbo": {"gemm": {"GEMM_TM": 8}},
            "Turbo 9000": {"gemm": {"GEMM_TM": 16}},
        }

    vendor = Vendor()
    plain = DeviceInfo("P", name="Model S")
    turbo = DeviceInfo("P", name="vendor turbo 9000 rev B")
    assert vendor.table_tuning(plain, "gemm") == {"GEMM_WG": 32}
    assert vendor.table_tuning(turbo, "gemm") == {"GEMM_TM": 16, "GEMM_WG": 32}  # longest wins
    assert vendor.table_tuning(plain, "extra") == {"X": 1}
    assert vendor.table_tuning(plain, "unknown") == {}
    vendor.table_tuning(plain, "gemm")["GEMM_WG"] = 0  # callers get a copy
    assert vendor.table_tuning(plain, "gemm")["GEMM_WG"] == 32


def test_register_profile_and_forced_profile(monkeypatch):
    class Fancy(VendorProfile):
        name = "fancy"
        priority = 200

        def matches(self, info):
            return "fancy" in info.platform_name.lower()

    fancy_info = DeviceInfo("Fancy CL", name="F1", type="gpu")
    try:
        register_profile(Fancy)
        assert profile_for(fancy_info).name == "fancy"
        assert profile_for(NVIDIA_GPU).name == "nvidia"
    finally:
        unregister_profile("fancy")
    assert profile_for(fancy_info).name == "generic"
    monkeypatch.setenv("PYRNN_CL_PROFILE", "PoCL")
    assert profile_for(NVIDIA_GPU).name == "pocl"
    monkeypatch.setenv("PYRNN_CL_PROFILE", "nonsense")
    with pytest.raises(ConfigurationError, match="PYRNN_CL_PROFILE='nonsense'.*one of"):
        profile_for(NVIDIA_GPU)
    with pytest.raises(TypeError):
        register_profile(object())

# }}}

# {{{ specs


@pytest.mark.parametrize("spec, expected", [
    ("2:0", NVIDIA_GPU),
    ("5:1", POCL_CUDA),
    ("0", APPLE_GPU),
    ("nvidia", NVIDIA_GPU),
    ("pocl", POCL_CUDA),  # a profile name: the best-ranked PoCL device (its GPU)
    ("apple", APPLE_GPU),
    ("AMD", AMD_GPU),  # profile name, case-insensitive: not the "AMD EPYC" CPUs
    ("gpu", AMD_GPU),
    ("cpu", POCL_DEBIAN),
    ("oclgrind", OCLGRIND),  # by name only
    ("i9-9880h", APPLE_CPU),  # Apple's CPU by name
    ("UHD", INTEL_GPU),
    ("rusticl", RUSTICL),
    ("intel:uhd", INTEL_GPU),
    ("portable:1", POCL_CUDA),
    ("6:", POCL_PIP),
], ids=_id)
def test_spec_selection(spec, expected):
    assert select_devices(spec, ZOO)[0] == expected


def test_spec_selection_lists_and_misses():
    assert select_devices("2:0;1:0", ZOO) == [NVIDIA_GPU, AMD_GPU]
    assert select_devices("5:0,1", ZOO) == [POCL_CUDA, POCL_DEBIAN]
    assert select_devices("nothing-like-this", ZOO) == []
    assert select_devices("9:9", ZOO) == []
    assert select_devices("", ZOO)[0] == AMD_GPU


@pytest.mark.parametrize("ctx, expected", [
    ("", APPLE_GPU),
    ("0", APPLE_GPU),
    ("0:1", APPLE_CPU),
    ("2", NVIDIA_GPU),
    (":", APPLE_GPU),
    ("Intel:0", INTEL_CPU),  # pyopencl: the *last* platform whose name contains "intel"
    ("Portable:0", POCL_PIP),  # two PoCL platforms: the last one wins
    ("Portable:1", None),  # ...and it has a single device: no match (pyopencl raises)
    ("5:1", POCL_CUDA),
    ("5:rtx", POCL_CUDA),
    ("apple:i9,0", APPLE_CPU),
], ids=_id)
def test_pyopencl_ctx_syntax(ctx, expected):
    # Parsed like pyopencl's create_some_context: platform index or substring (last match),
    # then device index or name substring.
    chosen = devices._select_pyopencl_ctx(ctx, ZOO)
    assert chosen == ([expected] if expected else [])


def test_pyopencl_ctx_matches_pyopencl_on_real_platforms():
    import pyopencl as cl

    infos = list_devices()
    if not infos:
        pytest.skip("no OpenCL device")
    for ctx in ("0", "0:0", ":", infos[0].platform_name[:5], f"0:{infos[0].name[:6]}"):
        ours = devices._select_pyopencl_ctx(ctx, infos)[0]
        theirs = cl.create_some_context(interactive=False, answers=ctx.split(":")).devices[0]
        assert ours.name == theirs.name and ours.platform_name == theirs.platform.name

# }}}

# {{{ default choice and environment


def test_env_precedence(fake_platforms, monkeypatch):
    fake_platforms(ZOO)
    assert get_device().info == AMD_GPU
    monkeypatch.setenv("PYOPENCL_CTX", "2")
    assert get_device().info == NVIDIA_GPU
    monkeypatch.setenv("PYRNN_CL_DEVICE", "cpu")
    assert get_device().info == POCL_DEBIAN  # PYRNN_CL_DEVICE beats PYOPENCL_CTX
    set_default_device("oclgrind")
    assert get_device().info == OCLGRIND  # an explicit default beats the environment
    set_default_device(None)
    assert get_device().info == POCL_DEBIAN
    monkeypatch.delenv("PYRNN_CL_DEVICE")
    monkeypatch.delenv("PYOPENCL_CTX")
    assert get_device().info == AMD_GPU


def test_get_device_is_memoized_per_physical_device(fake_platforms):
    fake_platforms(ZOO)
    assert get_device("nvidia") is get_device("2:0") is get_device("RTX 3080")
    assert get_device("gpu") is get_device()
    assert resolve_device("nvidia") is get_device("nvidia")
    assert resolve_device(get_device("cpu")) is get_device("cpu")
    with pytest.raises(TypeError):
        resolve_device(3.5)
    with pytest.raises(TypeError):
        get_device(0)


def test_default_skips_oclgrind_and_apple_cpu(fake_platforms):
    fake_platforms([OCLGRIND, APPLE_CPU])
    with pytest.raises(DeviceNotFoundError) as err:
        get_device()
    message = str(err.value)
    assert "Oclgrind" in message and "i9-9880H" in message and "asked for by name" in message
    assert get_device("oclgrind").info == OCLGRIND


def test_not_found_messages(fake_platforms):
    fake_platforms([POCL_DEBIAN])
    with pytest.raises(DeviceNotFoundError) as err:
        get_device("nvidia")
    message = str(err.value)
    assert "'nvidia'" in message and "pthread-skylake-avx512-AMD EPYC" in message
    assert "[5:0]" in message and "PYRNN_CL_DEVICE" in message

    fake_platforms([])
    with pytest.raises(DeviceNotFoundError) as err:
        get_device()
    message = str(err.value)
    assert 'pip install "pyrnn_cl[pocl]"' in message
    assert "apt install pocl-opencl-icd" in message and "ICD" in message
    assert isinstance(err.value, RuntimeError)


@pytest.mark.parametrize("error", ["logic", "runtime", "plain"])
def test_list_devices_is_empty_without_platforms(monkeypatch, error):
    import pyopencl as cl

    def no_platforms():
        if error == "plain":
            raise RuntimeError("no ICD")
        raise (cl.LogicError if error == "logic" else cl.RuntimeError)(
            "clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", no_platforms)
    assert list_devices() == []
    with pytest.raises(DeviceNotFoundError, match="no OpenCL platform"):
        get_device()


def test_check_dtype_without_opencl():
    no_fp64 = Device(object(), context=object(), queue=object(), info=APPLE_GPU)
    assert no_fp64.check_dtype("float32") == np.float32
    with pytest.raises(UnsupportedError) as err:
        no_fp64.check_dtype(np.float64)
    assert "Apple M2 Max" in str(err.value) and "cl_khr_fp64" in str(err.value)
    with pytest.raises(TypeError):
        no_fp64.check_dtype(np.float16)
    with pytest.raises(TypeError):
        no_fp64.check_dtype(np.int32)
    with_fp64 = Device(object(), context=object(), queue=object(),
                       info=dataclasses.replace(NVIDIA_GPU, max_work_group_size=1024))
    assert with_fp64.check_dtype("float64") == np.float64
    assert with_fp64.profile.name == "nvidia"
    wg = with_fp64.tuning("gemm")["GEMM_WG"]   # a few warps, within the device's limit
    assert wg % 32 == 0 and wg <= with_fp64.info.max_work_group_size

# }}}

# {{{ the real device


def test_real_device():
    import pyopencl as cl

    infos = list_devices()
    if not infos:
        pytest.skip("no OpenCL device")
    dev = resolve_device()
    assert isinstance(dev, Device) and dev.info in infos or dev.info.index in [
        i.index for i in infos]
    assert dev.profile.name in {"nvidia", "amd", "apple", "intel", "pocl", "generic"}
    assert dev.info.type in {"gpu", "cpu", "accelerator", "other"}
    assert dev.info.max_work_group_size >= 1 and dev.info.compute_units >= 1
    assert isinstance(dev.context, cl.Context) and isinstance(dev.queue, cl.CommandQueue)
    assert dev.cl_device == dev.queue.device
    assert resolve_device(None) is dev is get_device(dev.info.index)
    assert dev.check_dtype(np.float32) == np.float32
    if dev.info.has_fp64:
        assert dev.check_dtype(np.float64) == np.float64
    else:
        with pytest.raises(UnsupportedError):
            dev.check_dtype(np.float64)

    queue = cl.CommandQueue(dev.context)
    wrapped = resolve_device(queue)
    assert wrapped.queue is queue and wrapped.context == dev.context
    assert wrapped.info.index == dev.info.index
    # one Device per queue object (what a device keeps between calls lasts with the queue), and
    # the queue of a device made by get_device resolves to that device
    assert resolve_device(queue) is wrapped
    assert resolve_device(dev.queue) is dev
    assert resolve_device(cl.CommandQueue(dev.context)) is not wrapped
    set_default_device(queue)
    assert get_device().queue is queue

# }}}

# {{{ environment module and command line


def test_env_defaults_and_overrides(monkeypatch, tmp_path):
    from pyrnn_cl import _env

    for name in ("PYRNN_CL_CACHE_DIR", "PYRNN_CL_NO_CACHE", "PYRNN_CL_COMPILER_OUTPUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if sys.platform.startswith("linux"):
        assert _env.cache_dir() == tmp_path / "pyrnn_cl"
    monkeypatch.setenv("PYRNN_CL_CACHE_DIR", "~/elsewhere")
    assert _env.cache_dir() == Path("~/elsewhere").expanduser()
    assert _env.cache_enabled() and not _env.compiler_output()
    for value, expected in (("1", False), ("yes", False), ("0", True), ("off", True), ("", True)):
        monkeypatch.setenv("PYRNN_CL_NO_CACHE", value)
        assert _env.cache_enabled() is expected, value
    monkeypatch.setenv("PYRNN_CL_DEVICE", "  ")
    assert _env.device_spec() is None
    monkeypatch.setenv("PYRNN_CL_PROFILE", "NVIDIA")
    assert _env.forced_profile() == "nvidia"
    monkeypatch.delenv("PYRNN_CL_POOL_RESULTS", raising=False)
    assert _env.pool_results()              # on unless set to a false word
    for value, expected in (("0", False), ("off", False), ("1", True), ("", True)):
        monkeypatch.setenv("PYRNN_CL_POOL_RESULTS", value)
        assert _env.pool_results() is expected, value


def test_env_reads_follow_every_change(monkeypatch):
    """The fast read of a variable (``_env._raw``, which looks into os.environ's own storage)
    sees what ``os.environ.get`` sees: unset, set, changed, deleted, names outside ASCII, and
    an ``os.environ`` replaced by another mapping."""
    import os

    from pyrnn_cl import _env

    name = "PYRNN_CL_TEST_ONLY_VARIABLE"
    monkeypatch.delenv(name, raising=False)
    assert _env._raw(name) is None
    for value in ("1", " spaced ", "", "\u00e9t\u00e9"):
        monkeypatch.setenv(name, value)
        assert _env._raw(name) == os.environ.get(name) == value
    monkeypatch.delenv(name)
    assert _env._raw(name) is None
    monkeypatch.setenv("PYRNN_CL_TUNING", "0")
    assert not _env.use_tuned()
    monkeypatch.setattr(os, "environ", {name: "replaced", "PYRNN_CL_TUNING": "1"})
    assert _env._raw(name) == "replaced" and _env.use_tuned()


def test_profile_word_in_a_spec_names_the_implementation_under_a_forced_profile(
        fake_platforms, monkeypatch):
    """PYRNN_CL_PROFILE forces the tuning profile, not what a device is: with it set to
    "generic", the spec "pocl" still finds PoCL's device (it raised DeviceNotFoundError
    although `pyrnn-cl devices` listed the device as "(generic, cpu)"), and "generic" finds
    every device."""
    fake_platforms([POCL_DEBIAN, NVIDIA_GPU])
    monkeypatch.setenv("PYRNN_CL_PROFILE", "generic")
    assert select_devices("pocl") == [POCL_DEBIAN]
    assert select_devices("nvidia") == [NVIDIA_GPU]
    assert set(select_devices("generic")) == {POCL_DEBIAN, NVIDIA_GPU}
    monkeypatch.setenv("PYRNN_CL_DEVICE", "pocl")
    assert get_device().info.name == POCL_DEBIAN.name
    assert get_device().profile.name == "generic"


def test_cli_reports_a_bad_profile_variable_without_a_traceback(fake_platforms, monkeypatch,
                                                               capsys):
    from pyrnn_cl import cli

    fake_platforms([POCL_DEBIAN])
    monkeypatch.setenv("PYRNN_CL_PROFILE", "nonsense")
    assert cli.main(["devices"]) == 2
    err = capsys.readouterr().err
    assert "PYRNN_CL_PROFILE='nonsense'" in err and "Traceback" not in err


def test_cli_devices_table(fake_platforms, capsys):
    from pyrnn_cl import cli

    fake_platforms([OCLGRIND, POCL_DEBIAN, NVIDIA_GPU])
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    rows = {match.group(1): line for line in out.splitlines()
            if (match := re.match(r"^[*-]?\s+(\d+:\d+)\s", line))}
    assert rows["2:0"].startswith("*") and "nvidia" in rows["2:0"] and " gpu " in rows["2:0"]
    assert rows["7:0"].startswith("-") and "generic" in rows["7:0"]
    assert "yes" in rows["5:0"] and "pocl" in rows["5:0"]
    assert "ranking" in out
    assert cli.main(["devices", "-v"]) == 0
    assert "extensions: cl_khr_fp64" in capsys.readouterr().out


def test_cli_without_devices(fake_platforms, capsys):
    from pyrnn_cl import cli

    fake_platforms([])
    assert cli.main(["devices"]) == 1
    out = capsys.readouterr().out
    assert "No OpenCL device found" in out and 'pip install "pyrnn_cl[pocl]"' in out
    fake_platforms([OCLGRIND])
    assert cli.main(["devices"]) == 0
    assert "No default device" in capsys.readouterr().out


def test_cli_delegates_lazily(monkeypatch, capsys):
    from pyrnn_cl import cli

    calls = []
    fake = types.ModuleType("fake_selftest")
    fake.main = lambda args: calls.append(args) or 3
    monkeypatch.setitem(sys.modules, "fake_selftest", fake)
    monkeypatch.setitem(cli._DELEGATED, "selftest", ("fake_selftest", "help"))
    assert cli.main(["selftest", "--device", "pocl", "-h"]) == 3
    assert calls == [["--device", "pocl", "-h"]]
    monkeypatch.setitem(cli._DELEGATED, "bench", ("pyrnn_cl._no_such_module", "help"))
    assert cli.main(["bench"]) == 2
    assert "no pyrnn_cl._no_such_module module" in capsys.readouterr().err
    assert cli.main([]) == 2

# }}}


def test_cli_output_into_a_closed_pipe_ends_quietly():
    """`pyrnn-cl devices | head -1`: the reader has gone before the command writes; the command
    ends with status 1 and no traceback on stderr."""
    import os
    import subprocess

    read_end, write_end = os.pipe()
    os.close(read_end)             # nobody will read: the first write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "pyrnn_cl", "devices", "-v"],
                              stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    err = proc.stderr.decode()
    assert proc.returncode == 1, (proc.returncode, err)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
