"""Tuning: defaults derived from device queries, the tuning database, and the resolution order
(pyrnn_cl/tuning.py). The tuner itself is tested in test_tuner.py."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from helpers.fake_devices import (
    APPLE_M2,
    AVX2_CPU,
    AVX512_CPU,
    INTEL_ARC,
    INTEL_CPU_RT,
    NEON_CPU,
    NVIDIA_H100,
    TINY_GPU,
    ZOO,
)
from pyrnn_cl import plan, tuning
from pyrnn_cl.devices import DeviceInfo, profile_for
from pyrnn_cl.devices import info as info_module
from pyrnn_cl.errors import TuningWarning

# {{{ derived defaults


def _wg_limit(info):
    limit = info.max_work_group_size
    return min(limit, info.max_work_item_sizes[0]) if info.max_work_item_sizes else limit


def test_kernel_source_defaults_are_the_derived_ones():
    """The ``#ifndef`` defaults of the kernel sources (what a file compiles with on its own)
    are :func:`tuning.derive`'s values for an AVX-512 CPU, float32 and, where a source picks
    by ``PYRNN_DTYPE``, float64: one source of defaults. (``REC_VW`` defaults to 1 in
    ``common.h``, valid for every H; the host always passes it.)"""
    import re

    from pyrnn_cl.sources import read_source

    derived = tuning.derive(AVX512_CPU, profile_for(AVX512_CPU))
    files = {"gemm.cl": ("gemm", "gemm_f64"), "reduce.cl": ("reduce", None),
             "recurrence.cl": ("recurrence", "recurrence")}
    checked = 0
    for name, (f32, f64) in files.items():
        text = read_source(name)
        for key in derived[f32]:
            values = re.findall(rf"^#define {key} (\(\d+ \* GEMM_VW\)|\d+)", text, re.M)
            if not values:
                continue
            ints = [int(v) if v.isdigit() else int(v[1:].split()[0]) * derived[f32]["GEMM_VW"]
                    for v in values]      # (4 * GEMM_VW): the float32 GEMM_VW
            if len(ints) == 2:      # #if PYRNN_DTYPE == 2: float64, #else float32
                assert ints[1] == derived[f32][key], (name, key)
                if f64 is not None:
                    assert ints[0] == derived[f64][key], (name, key)
            else:
                assert ints == [derived[f32][key]], (name, key)
            checked += 1
    assert checked == 19    # (with the tiled GEMM kernel's GEMM_LOCAL and tile)


@pytest.mark.parametrize("info", ZOO, ids=lambda i: i.name)
def test_derived_defaults_are_complete_and_within_the_device_limits(info):
    profile = profile_for(info)
    derived = tuning.derive(info, profile)
    assert set(derived) == set(tuning.FAMILIES)
    for family, values in derived.items():
        # every tunable has a value, and the values pass the same check as stored entries
        assert set(values) == {p.name for p in tuning.SPACE[family]}, family
        assert tuning.valid_values(family, values) == values
        for name in ("GEMM_WG", "GEMM_PACK_WG", "REDUCE_WG", "REC_WG"):
            if name in values:
                assert values[name] <= _wg_limit(info), (family, name, values[name])
    gemm = derived["gemm"]
    if info.registers_per_group:
        # accumulators and operands of a whole group fit the registers the device reports
        assert gemm["GEMM_WG"] * 2 * gemm["GEMM_TM"] * gemm["GEMM_TN"] <= info.registers_per_group
    if info.type == "gpu":
        width = max(info.simd_widths) if info.simd_widths else profile.simd_width
        if _wg_limit(info) >= width:
            assert gemm["GEMM_WG"] % width == 0      # whole warps / wavefronts / sub-groups
    # GPUs run every product through the tiled kernel, with a tile the device can run (both
    # dtypes); CPU-like devices keep the register-tile kernels
    cpu_like = info.type == "cpu" or profile.prefers_explicit_vectors
    for family, itemsize in (("gemm", 4), ("gemm_f64", 8)):
        values = derived[family]
        runs_tiled = not cpu_like and info.max_work_group_size >= 64    # the smallest tile
        assert values["GEMM_LOCAL"] == runs_tiled, (family, info.name)
        if runs_tiled:
            assert tuning.gemm_local_fits(info, values, itemsize), (family, values)
            wg0, wg1 = tuning.gemm_local_work_group(values)
            if info.registers_per_group:
                assert wg0 * wg1 * 2 * values["GEMM_LTM"] * values["GEMM_LTN"] * itemsize // 4 \
                    <= info.registers_per_group


@pytest.mark.parametrize("info", [AVX2_CPU, AVX512_CPU, NEON_CPU, INTEL_CPU_RT],
                         ids=lambda v: v.name)
def test_cpu_register_tiles_fit_the_register_file(info):
    """A work-item's accumulators and operand vectors stay within the vector registers its
    native width implies (a spilled tile ran 1.35-1.6x slower on AVX2 code), in float32 and
    float64, for the outer-product kernel (TM x TN/VW accumulators, TN/VW row vectors of Q, a
    broadcast) and the dot kernel (DTM x DTN accumulators, DTM + DTN operand vectors)."""
    registers = tuning.vector_registers(info)
    assert registers == (32 if info.native_vector_width_float >= 16 else 16)
    derived = tuning.derive(info, profile_for(info))
    for family in ("gemm", "gemm_f64"):
        g = derived[family]
        tnv = g["GEMM_TN"] // g["GEMM_VW"]
        assert g["GEMM_TN"] % g["GEMM_VW"] == 0
        assert g["GEMM_TM"] * tnv + tnv + 1 <= registers
        assert g["GEMM_TM"] * tnv >= registers // 2        # and uses most of it
        dtm, dtn = g["GEMM_DTM"], g["GEMM_DTN"]
        assert dtm * dtn + dtm + dtn <= registers < (dtm + 1) * (dtn + 1) + dtm + dtn + 2
        assert tuning.valid_values(family, g) == g


@pytest.mark.parametrize("info, width", [(AVX2_CPU, 8), (AVX512_CPU, 16), (NEON_CPU, 4),
                                         (INTEL_CPU_RT, 8)], ids=lambda v: getattr(v, "name", v))
def test_cpu_vectors_follow_the_native_width(info, width):
    """No vector wider than the native one: on AVX2 a float16 changes the calling convention
    (and the compiler prints a warning on stderr per kernel)."""
    derived = tuning.derive(info, profile_for(info))
    assert derived["gemm"]["GEMM_VW"] == derived["gemm"]["GEMM_DVW"] == width
    assert derived["gemm"]["GEMM_PACK_KC"] <= max(4, width)
    assert derived["recurrence"]["REC_VW"] == derived["reduce"]["REDUCE_VW"] == width
    assert derived["recurrence"]["REC_VW_F64"] == info.native_vector_width_double
    assert derived["gemm_f64"]["GEMM_VW"] == info.native_vector_width_double


def test_derived_defaults_differ_where_the_devices_do():
    avx2, avx512 = (tuning.derive(i, profile_for(i)) for i in (AVX2_CPU, AVX512_CPU))
    # register tiles from the register file: 6 x 2 vectors of 8 (AVX2, 16 registers), 6 x 4
    # vectors of 16 (AVX-512, 32); dot tiles 3 x 3 and 4 x 4
    assert (avx2["gemm"]["GEMM_TM"], avx2["gemm"]["GEMM_TN"]) == (6, 16)
    assert (avx512["gemm"]["GEMM_TM"], avx512["gemm"]["GEMM_TN"]) == (6, 64)
    assert avx2["gemm"]["GEMM_DTM"] == avx2["gemm"]["GEMM_DTN"] == 3
    assert avx512["gemm"]["GEMM_DTM"] == avx512["gemm"]["GEMM_DTN"] == 4
    # the last-level cache bounds what whole-sequence kernels stream per step
    neon = tuning.derive(NEON_CPU, profile_for(NEON_CPU))["recurrence"]
    assert neon["REC_SEQ_MAX_BYTES"] == (1 << 20) // 8
    assert neon["REC_SEQ_STREAM_BYTES"] == 1 << 20
    # PoCL specialises per local size: one fixed local size; others let the driver choose
    assert avx2["recurrence"]["REC_WG"] == 1
    h100 = tuning.derive(NVIDIA_H100, profile_for(NVIDIA_H100))["recurrence"]
    assert h100["REC_WG"] == 0
    # a GPU splits a tile's products over one warp; a CPU work-item owns its tile
    assert h100["REC_KS"] == 32 and avx2["recurrence"]["REC_KS"] == 1
    # 16-bit packs: always on a GPU; on a CPU for an R beyond a quarter of the last-level
    # cache (an LSTM of H = 1024, 16 MiB, on 32 MiB; H = 256, 1 MiB, on a 1 MiB cache); never
    # where no cache size is reported
    assert h100["REC_PACK16_BYTES"] == 0
    assert avx2["recurrence"]["REC_PACK16_BYTES"] == 8 << 20
    assert neon["REC_PACK16_BYTES"] == 256 << 10
    unknown = tuning.derive(dataclasses.replace(AVX2_CPU, global_mem_cache_size=0),
                            profile_for(AVX2_CPU))["recurrence"]
    assert unknown["REC_PACK16_BYTES"] == tuning.NEVER


def test_whole_sequence_kernels_leave_the_per_core_slices_to_per_step_launches():
    """Each work-group of a whole-sequence launch reads all of R every step, while per-step
    launches split R over the cores: an R beyond the host's level-2 cache whose share per core
    fits it runs per step (a Xeon with 2 MiB per core and a 300 MiB last level: LSTM 512/16
    forward, R 4 MiB, 26.9 ms whole-sequence against 14.5 ms per step), a larger one up to the
    limit whole-sequence again (a Zen 4 with 1 MiB per core: 4-5 % faster), also through
    PoCL's table, which holds no size of its own. What the plan decides, per R, on two cores
    with two work-groups."""
    xeon = dataclasses.replace(AVX512_CPU, global_mem_cache_size=300 << 20,
                               core_cache_size=2 << 20, compute_units=2)
    zen4 = dataclasses.replace(xeon, global_mem_cache_size=32 << 20, core_cache_size=1 << 20)
    mib = 1 << 20
    for info, whole in ((xeon, {1: True, 2: True, 3: False, 4: False, 5: False}),
                        (zen4, {1: True, 2: False, 3: True, 4: True, 5: False})):
        values, _ = tuning.resolve(info, profile_for(info), "recurrence")
        assert values["REC_SEQ_SPLIT_BYTES"] == info.core_cache_size
        assert values["REC_SEQ_MAX_BYTES"] == 4 * mib          # min(4 MiB, last level / 8)
        assert values["REC_SEQ_BYTES"] == 1 << 18              # small layers: always one launch
        got = {r: plan._whole_sequence_fits(values, 2, r * mib, 2) for r in whole}
        assert got == whole, info.core_cache_size
    # unknown (no sysfs): the last-level rule alone, no band
    info = dataclasses.replace(xeon, core_cache_size=0)
    values, _ = tuning.resolve(info, profile_for(info), "recurrence")
    assert values["REC_SEQ_SPLIT_BYTES"] == 0 and values["REC_SEQ_MAX_BYTES"] == 4 * mib
    assert plan._whole_sequence_fits(values, 2, 3 * mib, 2)


def test_last_level_cache_from_the_host_where_the_runtime_reports_level_2():
    """Intel's CPU runtime reports its level 2 as the global cache (2 MiB on a Xeon with a
    300 MiB last level); the host's own last level (sysfs) stands in, so both runtimes of one
    CPU derive the same whole-sequence and 16-bit-pack limits; a device that reports nothing
    keeps the rules' unknown-cache values."""
    pocl = dataclasses.replace(AVX512_CPU, global_mem_cache_size=300 << 20,
                               core_cache_size=2 << 20, last_cache_size=300 << 20)
    intel = dataclasses.replace(INTEL_CPU_RT, native_vector_width_float=16,
                                native_vector_width_double=8, global_mem_cache_size=2 << 20,
                                core_cache_size=2 << 20, last_cache_size=300 << 20)
    keys = ("REC_SEQ_MAX_BYTES", "REC_SEQ_STREAM_BYTES", "REC_PACK16_BYTES")
    got = [tuning.derive(i, profile_for(i))["recurrence"] for i in (pocl, intel)]
    assert [g["REC_SEQ_MAX_BYTES"] for g in got] == [4 << 20, 4 << 20]
    assert [g["REC_SEQ_SPLIT_BYTES"] for g in got] == [2 << 20, 2 << 20]
    assert got[1]["REC_SEQ_STREAM_BYTES"] == 300 << 20
    assert got[1]["REC_PACK16_BYTES"] == 75 << 20
    # without the host's figure: the runtime's (level 2) as before
    alone = tuning.derive(dataclasses.replace(intel, last_cache_size=0),
                          profile_for(intel))["recurrence"]
    assert [alone[k] for k in keys] == [256 << 10, 2 << 20, 512 << 10]


def test_host_core_cache_size_reads_sysfs(tmp_path):
    """Level 2 of cpu0, whole (the weight it holds is the same data for every CPU sharing it),
    and its last level; 0 where sysfs does not say."""
    def cache(index, level, kind, size, shared):
        d = tmp_path / "cache" / f"index{index}"
        d.mkdir(parents=True)
        for name, text in (("level", level), ("type", kind), ("size", size),
                           ("shared_cpu_list", shared)):
            (d / name).write_text(text + "\n")

    cache(0, "1", "Data", "48K", "0")
    cache(1, "1", "Instruction", "32K", "0")
    cache(2, "2", "Unified", "2048K", "0,64")       # two hyper-threads share it
    cache(3, "3", "Unified", "307200K", "0-127")
    assert info_module.host_core_cache_size.__wrapped__(str(tmp_path / "cache")) == 2 << 20
    assert info_module.host_core_cache_size.__wrapped__(str(tmp_path / "nowhere")) == 0
    # the last level: the highest level's size
    assert info_module.host_last_cache_size.__wrapped__(str(tmp_path / "cache")) == 300 << 20
    assert info_module.host_last_cache_size.__wrapped__(str(tmp_path / "nowhere")) == 0
    (tmp_path / "cache" / "index2" / "size").write_text("lots\n")
    assert info_module.host_core_cache_size.__wrapped__(str(tmp_path / "cache")) == 0


def test_gpu_tiled_gemm_tiles():
    """The tiled GEMM's tile: 128 x 128 blocks of 8 x 8 where the device has room (H100 both
    dtypes), smaller where its work-group, local memory or registers are smaller."""
    tile = [tuning.derive(i, profile_for(i))["gemm"] for i in (NVIDIA_H100, TINY_GPU)]
    f64 = tuning.derive(APPLE_M2, profile_for(APPLE_M2))["gemm_f64"]
    h100_f64 = tuning.derive(NVIDIA_H100, profile_for(NVIDIA_H100))["gemm_f64"]
    keys = tuning.GEMM_LOCAL_KEYS
    assert [tile[0][k] for k in keys] == [128, 128, 16, 8, 8]
    assert [h100_f64[k] for k in keys] == [128, 128, 16, 8, 8]
    # 64 work-items, 2048 registers: 8 x 8 work-items of 4 x 4 (2 x 16 registers each)
    assert [tile[1][k] for k in keys] == [32, 32, 16, 4, 4]
    # 32 KiB of local memory: the float64 chunks of 128 x 128 blocks (33 KiB) do not fit
    assert f64["GEMM_LBM"] < 128 and tuning.gemm_local_fits(APPLE_M2, f64, 8)


def test_reported_lock_step_width_wins_over_the_profile():
    arc = tuning.derive(INTEL_ARC, profile_for(INTEL_ARC))
    assert arc["gemm"]["GEMM_WG"] == 4 * 32     # largest reported sub-group size
    guessed = dataclasses.replace(INTEL_ARC, simd_widths=())
    assert tuning.derive(guessed, profile_for(guessed))["gemm"]["GEMM_WG"] == \
        4 * profile_for(guessed).simd_width


def test_every_profile_attribute_is_read():
    """A quirk that no code reads misleads the reader: each class attribute of a profile must
    be read somewhere in the package (``.name``; definitions have no dot)."""
    import pathlib

    import pyrnn_cl
    from pyrnn_cl.devices.base import VendorProfile

    root = pathlib.Path(pyrnn_cl.__file__).parent
    code = "\n".join(p.read_text() for p in root.rglob("*.py"))
    attributes = set()
    for profile in {type(profile_for(i)) for i in ZOO} | {VendorProfile}:
        for klass in profile.__mro__:
            attributes |= {name for name, value in vars(klass).items()
                           if not name.startswith("_") and not callable(value)
                           and not isinstance(value, (classmethod, staticmethod, property))}
    for name in sorted(attributes - {"name", "priority", "TUNING"}):
        assert f".{name}" in code, f"profile attribute {name} is read by no code"


def test_valid_values_rejects_what_the_kernels_cannot_take():
    tile = {"GEMM_LBM": 64, "GEMM_LBN": 64, "GEMM_LBK": 16, "GEMM_LTM": 4, "GEMM_LTN": 4}
    for bad in ({"GEMM_VW": 3}, {"GEMM_VW": 8, "GEMM_TN": 12}, {"GEMM_TM": 0},
                {"GEMM_TM": "4"}, {"GEMM_TM": True}, {"NOT_A_PARAM": 1}, {"GEMM_LOCAL": 2},
                dict(tile, GEMM_LTM=3), dict(tile, GEMM_LBN=60, GEMM_LTN=8),
                dict(tile, GEMM_LTM=1, GEMM_LTN=2)):     # 64 x 32 work-items
        with pytest.raises(ValueError):
            tuning.valid_values("gemm", bad)
    with pytest.raises(ValueError, match="unknown kernel family"):
        tuning.valid_values("fft", {})
    assert tuning.valid_values("gemm", {"GEMM_VW": 8, "GEMM_TN": 24}) == {"GEMM_VW": 8,
                                                                           "GEMM_TN": 24}
    assert tuning.valid_values("gemm", dict(tile, GEMM_LBM=24, GEMM_LTM=3)) == \
        dict(tile, GEMM_LBM=24, GEMM_LTM=3)

# }}}

# {{{ the database


@pytest.fixture
def db(tmp_path, monkeypatch):
    """An empty user database and an empty shipped one."""
    monkeypatch.setenv("PYRNN_CL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYRNN_CL_TUNING", raising=False)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(tuning, "shipped_dir", lambda: shipped)
    monkeypatch.setattr(tuning, "_WARNED", set())
    return tmp_path


def _resolve(info, family):
    return tuning.resolve(info, profile_for(info), family)


def test_save_load_merge_and_resolve(db):
    info = AVX2_CPU
    values, origin = _resolve(info, "gemm")
    assert origin == "derived" and values == tuning.derive(info, profile_for(info))["gemm"]
    assert _resolve(info, "recurrence")[1] == "derived+profile"   # PoCL's measured thresholds
    path = tuning.save_entry(info, {"gemm": {"GEMM_TM": 2, "GEMM_WG": 8}})
    assert path == tuning.entry_path(info) and path.is_file()
    values, origin = _resolve(info, "gemm")
    assert values["GEMM_TM"] == 2 and values["GEMM_WG"] == 8 and origin.startswith("tuned")
    assert values["GEMM_VW"] == 8                      # untuned names keep the derived value
    assert tuning.is_tuned(info) == "user"
    # tuning another family later keeps the first one
    tuning.save_entry(info, {"recurrence": {"REC_NB": 2}})
    assert _resolve(info, "gemm")[0]["GEMM_TM"] == 2
    assert _resolve(info, "recurrence")[0]["REC_NB"] == 2
    # ... and tuning it again replaces it
    tuning.save_entry(info, {"gemm": {"GEMM_TM": 8}})
    assert _resolve(info, "gemm")[0]["GEMM_TM"] == 8
    assert "GEMM_WG" not in json.loads(path.read_text())["families"]["gemm"]
    # another device's entry is another file
    assert tuning.entry_path(AVX512_CPU) != path
    assert _resolve(AVX512_CPU, "gemm")[1] == "derived"


def test_tuning_0_ignores_every_entry(db, monkeypatch):
    tuning.save_entry(AVX2_CPU, {"gemm": {"GEMM_TM": 2}})
    monkeypatch.setenv("PYRNN_CL_TUNING", "0")
    values, origin = _resolve(AVX2_CPU, "gemm")
    assert values == tuning.derive(AVX2_CPU, profile_for(AVX2_CPU))["gemm"]
    assert origin == "derived"
    monkeypatch.setenv("PYRNN_CL_TUNING", "1")
    assert _resolve(AVX2_CPU, "gemm")[0]["GEMM_TM"] == 2


def test_shipped_entry_and_user_entry_precedence(db):
    info = AVX2_CPU
    entry = tuning.make_entry(info, {"gemm": {"GEMM_TM": 3}, "reduce": {"REDUCE_NV": 2}})
    tuning.shipped_path(info).write_text(json.dumps(entry))
    values, origin = _resolve(info, "gemm")
    assert values["GEMM_TM"] == 3 and origin.startswith("shipped")
    assert tuning.is_tuned(info) == "shipped"
    tuning.save_entry(info, {"gemm": {"GEMM_TM": 1}})
    assert _resolve(info, "gemm")[0]["GEMM_TM"] == 1          # the user's own tune wins
    assert _resolve(info, "reduce")[0]["REDUCE_NV"] == 2       # the shipped family still applies


def _corrupt(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("what", ["garbage", "not an object", "foreign", "stale kernels",
                                  "bad value", "old format", "unknown family"])
def test_bad_entries_warn_once_and_fall_back(db, what):
    info = AVX2_CPU
    entry = tuning.make_entry(info, {"gemm": {"GEMM_TM": 2}})
    if what == "garbage":
        text = "{not json"
    elif what == "not an object":
        text = "[1, 2]"
    elif what == "foreign":
        entry["device"] = tuning.entry_key(AVX512_CPU)
        text = json.dumps(entry)
    elif what == "stale kernels":
        entry["kernel_versions"]["gemm"] = "0" * 16
        text = json.dumps(entry)
    elif what == "bad value":
        entry["families"]["gemm"]["GEMM_VW"] = 3
        text = json.dumps(entry)
    elif what == "old format":
        entry["format"] = 0
        text = json.dumps(entry)
    else:
        entry["families"]["fft"] = {"X": 1}
        text = json.dumps(entry)
    _corrupt(tuning.entry_path(info), text)
    with pytest.warns(TuningWarning, match="ignoring tuning entry"):
        values, origin = _resolve(info, "gemm")
    assert values == tuning.derive(info, profile_for(info))["gemm"] and origin == "derived"
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # one warning per file, not one per call
        tuning.resolve(info, profile_for(info), "reduce")
    assert tuning.is_tuned(info) == ""
    # a new tune replaces the bad file and is used
    tuning.save_entry(info, {"gemm": {"GEMM_TM": 8}})
    assert _resolve(info, "gemm")[0]["GEMM_TM"] == 8


def test_entry_key_holds_platform_device_driver_and_kernels(db):
    entry = tuning.make_entry(AVX2_CPU, {})
    assert entry["device"] == {"platform": AVX2_CPU.platform_name,
                               "platform_version": AVX2_CPU.platform_version,
                               "device": AVX2_CPU.name, "driver_version": "1.0",
                               "compute_units": AVX2_CPU.compute_units,
                               "native_vector_width_float": 8}
    assert entry["kernel_version"] == tuning.kernel_version()
    for other in (dataclasses.replace(AVX2_CPU, driver_version="2.0"),
                  # Intel's CPU runtime names AVX2 and AVX-512 machines alike, by CPU brand
                  dataclasses.replace(AVX2_CPU, native_vector_width_float=16),
                  dataclasses.replace(AVX2_CPU, compute_units=64)):
        assert tuning.entry_path(other) != tuning.entry_path(AVX2_CPU)
        tuning.save_entry(AVX2_CPU, {"gemm": {"GEMM_TM": 8}}, path=tuning.entry_path(other))
        with pytest.warns(TuningWarning, match="another device"):
            assert tuning.load_entry(tuning.entry_path(other), other) is None


def test_shipped_database_entries_are_valid():
    """Every entry shipped in the package parses, is stored under the name its device key
    gives, holds valid values, and was tuned for these kernels: an entry for older kernel
    sources is dead weight (skipped without a word on its device), so a kernel change re-tunes
    or removes it in the same commit."""
    for path in sorted(tuning.shipped_dir().glob("*.json")):
        data = json.loads(path.read_text())
        assert data["format"] == tuning.FORMAT, path
        info = DeviceInfo(platform_name=data["device"]["platform"],
                          platform_version=data["device"]["platform_version"],
                          name=data["device"]["device"],
                          driver_version=data["device"]["driver_version"],
                          compute_units=data["device"]["compute_units"],
                          native_vector_width_float=data["device"]["native_vector_width_float"])
        assert tuning.shipped_path(info) == path, "rename it to " + tuning.shipped_path(info).name
        for family, values in data["families"].items():
            tuning.valid_values(family, values)
        assert set(data["kernel_versions"]) == set(data["families"]), path.name
        for family, version in data["kernel_versions"].items():
            assert version == tuning.kernel_version(family), (
                f"{path.name}: {family} was tuned for kernel version {version}, its kernels "
                f"are now {tuning.kernel_version(family)}: re-tune on that device "
                f"(docs/tuning.md) or delete the family (the file, if it was the last)")


def test_stale_shipped_entry_is_skipped_quietly_stale_user_entry_warns(db):
    """A shipped entry for older kernels is skipped without a warning (the user can do nothing
    about it); the user's own stale entry warns once and names `pyrnn-cl tune`."""
    info = dataclasses.replace(AVX2_CPU, driver_version="stale-test")
    for path in (tuning.shipped_path(info), tuning.entry_path(info)):
        tuning.save_entry(info, {"gemm": {"GEMM_TM": 8}}, path=path)
        data = json.loads(path.read_text())
        data["kernel_versions"]["gemm"] = "0" * 16
        path.write_text(json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.load_entry(tuning.shipped_path(info), info, warn_stale=False) is None
    with pytest.warns(TuningWarning, match="other kernels.*pyrnn-cl tune"):
        assert tuning.is_tuned(info) == ""


def test_kernel_change_stales_only_its_families(db):
    """Each family's values are kept with the version of its own sources: after a change to
    one family's kernels only that family falls back to the derived defaults (one warning
    naming it), the others still apply. An entry from before per-family versions is judged by
    the version of all sources."""
    info = dataclasses.replace(AVX2_CPU, driver_version="family-stale-test")
    path = tuning.save_entry(info, {"gemm": {"GEMM_TM": 2}, "reduce": {"REDUCE_NV": 2}})
    data = json.loads(path.read_text())
    assert data["kernel_versions"] == {"gemm": tuning.kernel_version("gemm"),
                                       "reduce": tuning.kernel_version("reduce")}
    data["kernel_versions"]["gemm"] = "0" * 16
    path.write_text(json.dumps(data))
    with pytest.warns(TuningWarning, match="gemm tuned for other kernels") as caught:
        assert _resolve(info, "gemm")[0]["GEMM_TM"] == tuning.derive(info, profile_for(info))[
            "gemm"]["GEMM_TM"]
    assert "reduce" not in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _resolve(info, "reduce")[0]["REDUCE_NV"] == 2
        assert tuning.is_tuned(info) == "user"
    # the older layout: one version of every source
    del data["kernel_versions"]
    for version, applies in ((tuning.kernel_version(), True), ("0" * 16, False)):
        data["kernel_version"] = version
        path.write_text(json.dumps(data) + " " * applies)     # (a new size: read again)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            families = tuning.load_entry(path, info)
        assert (families == {"gemm": {"GEMM_TM": 2}, "reduce": {"REDUCE_NV": 2}}) == applies
        assert (families is None) == (not applies)


def test_family_sources_cover_every_kernel_reading_their_parameters():
    """A kernel source naming a family's compiled parameter is among that family's files, so a
    change to it makes the family's tuned values stale; and the whole-source version covers
    every file."""
    root = Path(tuning.__file__).parent / "cl"
    sources = sorted(p for p in root.rglob("*") if p.suffix in (".cl", ".h"))
    for family, params in tuning.SPACE.items():
        files = set(tuning.family_files(family))
        names = [p.name for p in params if p.compiled]
        for path in sources:
            text = path.read_text()
            used = [n for n in names if re.search(rf"\b{n}\b", text)]
            assert not used or path.resolve() in files, (family, path.name, used)
    # each version changes with its own files only
    assert len({tuning.kernel_version(f) for f in ("gemm", "reduce", "recurrence")}) == 3
    assert tuning.kernel_version("gemm") == tuning.kernel_version("gemm_f64")

# }}}

# {{{ on the device


def test_device_uses_a_tuned_entry_and_stays_correct(device, db):
    """A tuned entry changes what the device's kernels are built with, and the results stay
    those of the derived defaults."""
    import pyrnn_cl as rc

    rng = np.random.default_rng(7)
    T, N, I, H = 5, 3, 7, 11
    x = rng.standard_normal((T, N, I)).astype(np.float32)
    W = (0.3 * rng.standard_normal((4 * H, I))).astype(np.float32)
    R = (0.3 * rng.standard_normal((4 * H, H))).astype(np.float32)
    before = rc.lstm(x, R, W, device=device)[0]
    assert device.tuning_source("recurrence") in ("derived", "derived+profile")
    tuning.save_entry(device.info, {"recurrence": {"REC_NB": 1, "REC_BWD_ROWS": 7},
                                    "gemm": {"GEMM_TM": 2}})
    assert device.tuning("recurrence")["REC_NB"] == 1
    assert device.tuning_source("gemm").startswith("tuned")
    after = rc.lstm(x, R, W, device=device)[0]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)


def test_cold_build_writes_nothing_to_stderr(device, tmp_path):
    """Compiling every kernel of an LSTM forward and backward from empty caches prints
    nothing: no compiler diagnostics in normal use (vector widths within the native one).
    The first-use notice, which a loaded machine may trigger, is silenced."""
    env = dict(os.environ, PYRNN_CL_CACHE_DIR=str(tmp_path / "k"),
               POCL_CACHE_DIR=str(tmp_path / "pocl"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               PYRNN_CL_DEVICE=device.info.index, PYRNN_CL_QUIET="1")
    env.pop("PYRNN_CL_COMPILER_OUTPUT", None)
    script = (
        "import numpy as np, pyrnn_cl as rc\n"
        "r = np.random.default_rng(0)\n"
        "T, N, I, H = 4, 3, 5, 24\n"
        "x = r.random((T, N, I), np.float32); W = r.random((4*H, I), np.float32)\n"
        "R = r.random((4*H, H), np.float32); d = rc.LSTMDescriptor(training=True)\n"
        "y, c, z = rc.lstm(x, R, W, descriptor=d)\n"
        "rc.lstm_gradients(x, R, np.ones_like(y), z, c, W, descriptor=d)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr

# }}}
