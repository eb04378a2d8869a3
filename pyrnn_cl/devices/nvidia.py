"""NVIDIA's OpenCL runtime (the CUDA driver's ICD)."""

from __future__ import annotations

from .base import TIER_FAST_GPU, VendorProfile, is_mesa


class NvidiaProfile(VendorProfile):
    name = "nvidia"
    priority = 50

    # A warp is 32 threads on every NVIDIA architecture with OpenCL support.
    simd_width = 32
    # The driver keeps a ComputeCache of PTX->SASS builds (it went stale with changed headers,
    # pitfalls C8; our key hashes the expanded source, so that cannot bite us).
    caches_builds = True
    # NVIDIA does not report cl_khr_fp16 although drivers >= 531 do basic half arithmetic without
    # the half math builtins (pitfalls C7). DeviceInfo.has_fp16 therefore stays False and fp16 is
    # storage-only (vload_half/vstore_half, core in OpenCL 1.2).
    reports_fp16 = False
    # Every build logs "Function <k> is a kernel, so overriding noinline attribute" per kernel
    # (inducer/pyopencl#756): pure noise.
    BENIGN_LOG_LINES = (r"overriding noinline", r"^\s*The function may be inlined")

    TUNING = {
        "default": {
            "gemm": {"GEMM_TM": 4, "GEMM_TN": 4, "GEMM_VW": 4, "GEMM_WG": 128},
            "recurrence": {"REC_VW": 4, "REC_NB": 4},
        },
    }

    def matches(self, info) -> bool:
        if is_mesa(info):
            return False
        return "nvidia" in (info.platform_vendor + info.platform_name + info.vendor).lower()

    def default_rank(self, info):
        if info.type == "gpu":
            return (TIER_FAST_GPU, 0)
        return super().default_rank(info)
