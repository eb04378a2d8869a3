"""AMD's OpenCL runtimes (ROCm and the older AMD APP SDK / Adrenalin ICD)."""

from __future__ import annotations

from .base import TIER_FAST_GPU, VendorProfile, is_mesa


class AmdProfile(VendorProfile):
    name = "amd"
    priority = 50

    # Wavefront: 64 on GCN/CDNA, 32 on RDNA (which can also run wave64); 64 is the safe multiple.
    simd_width = 64
    # (Note:) ROCm has been seen to give silently wrong results after a Linux kernel update,
    # without an API error (pitfalls C9): the selftest against the float64 reference is the
    # defence, the driver version is part of the kernel cache key and of a tuning entry's key,
    # and the tuner checks every candidate's results before timing it.

    def matches(self, info) -> bool:
        if is_mesa(info):
            return False
        platform = (info.platform_vendor + " " + info.platform_name).lower()
        if "advanced micro devices" in platform or "amd accelerated parallel" in platform:
            return True
        vendor = info.vendor.lower()
        # The device vendor alone decides only for GPUs: "AMD" also appears in CPU names that
        # other runtimes (PoCL, Intel's CPU runtime) expose.
        return info.type == "gpu" and ("advanced micro devices" in vendor or vendor == "amd")

    def default_rank(self, info):
        if info.type == "gpu":
            return (TIER_FAST_GPU, 0)
        return super().default_rank(info)
