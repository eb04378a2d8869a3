"""The tuning a GPU derives, run on the test devices (CI has no GPU): every op of the self-test
(all three dialects, forward and gradients, against the float64 reference) with the values
``tuning.derive`` gives an NVIDIA H100 and an AMD MI-series GPU for every kernel family, so the
GPU code paths (recurrence products split over ``REC_KS`` lanes of a work-group, the
local-memory tiled GEMM, per-step kernels) stay correct between the sessions that have a GPU.
Speed on the CPU devices is not the point: only the answers are checked."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.device import needs_fp64
from helpers.fake_devices import AMD_MI, NVIDIA_H100
from pyrnn_cl import selftest, tuning
from pyrnn_cl.devices import profile_for


@pytest.mark.parametrize("gpu", [NVIDIA_H100, pytest.param(AMD_MI, marks=pytest.mark.slow)],
                         ids=["h100", "amd-mi"])
def test_selftest_with_a_gpus_derived_tuning(device, monkeypatch, gpu):
    needs_fp64(device)
    derived = tuning.derive(gpu, profile_for(gpu))
    assert derived["recurrence"]["REC_KS"] > 1 and derived["gemm"]["GEMM_LOCAL"] == 1, \
        "a GPU's derived tuning must take the GPU paths this test is about"
    monkeypatch.setattr(device, "tuning", lambda family: dict(derived[family]))
    results = selftest.run_checks(device, np.float64)
    assert len(results) == len(selftest.CHECKS)
    bad = [f"{r.check.op} [{r.check.config}]: {r.status} {r.message} "
           f"forward {r.forward:.1e} gradient {r.gradient:.1e}"
           for r in results if r.status != "ok"]
    assert not bad, "\n".join(bad)


def test_selftest_with_whole_sequence_kernels_in_the_gpu_layout(device, monkeypatch):
    """A GPU's derived tuning with whole-sequence kernels turned on for small layers (what a
    GPU tune may adopt: REC_SEQ_BYTES > 0): those layers run one work-item per tile with one
    unit each (REC_VW = 1), a work-group of them per direction, the others the split per-step
    kernels; every self-test op stays right."""
    needs_fp64(device)
    derived = tuning.derive(NVIDIA_H100, profile_for(NVIDIA_H100))
    derived["recurrence"]["REC_SEQ_BYTES"] = 1 << 20
    monkeypatch.setattr(device, "tuning", lambda family: dict(derived[family]))
    getattr(device, "_pyrnn_layers", {}).clear()       # (only this test's layers below)
    results = selftest.run_checks(device, np.float64)
    assert len(results) == len(selftest.CHECKS)
    bad = [f"{r.check.op} [{r.check.config}]: {r.status} {r.message}"
           for r in results if r.status != "ok"]
    assert not bad, "\n".join(bad)
    fused = [layer for layer in getattr(device, "_pyrnn_layers", {}).values() if layer.fused]
    # (and a work-item per vector of units: REC_SEQ_LOOP = 0, the GPU's whole-sequence layout)
    assert fused and all(layer.ks == 1 and layer.vw == 1 and not layer.seq_loop
                         for layer in fused)
