"""NVIDIA's OpenCL runtime (the CUDA driver's ICD)."""

from __future__ import annotations

from .base import TIER_FAST_GPU, VendorProfile, is_mesa


class NvidiaProfile(VendorProfile):
    name = "nvidia"
    priority = 50

    # A warp is 32 threads on every NVIDIA architecture with OpenCL support (the driver also
    # reports it through cl_nv_device_attribute_query, which DeviceInfo.simd_widths reads).
    simd_width = 32
    # (Notes, no switch needed:) the driver keeps a ComputeCache of PTX->SASS builds (it went
    # stale with changed headers, pitfalls C8; our key hashes the expanded source). NVIDIA does
    # not report cl_khr_fp16 although drivers >= 531 do basic half arithmetic (pitfalls C7):
    # DeviceInfo.has_fp16 stays False and fp16 is storage-only (vload_half/vstore_half).
    # Every build logs "Function <k> is a kernel, so overriding noinline attribute" per kernel
    # (inducer/pyopencl#756): pure noise.
    BENIGN_LOG_LINES = (r"overriding noinline", r"^\s*The function may be inlined")

    def matches(self, info) -> bool:
        if is_mesa(info):
            return False
        return "nvidia" in (info.platform_vendor + info.platform_name + info.vendor).lower()

    def default_rank(self, info):
        if info.type == "gpu":
            return (TIER_FAST_GPU, 0)
        return super().default_rank(info)
