"""Apple's OpenCL runtime on macOS (deprecated since 10.14, still shipped; pitfalls C1-C5)."""

from __future__ import annotations

from .base import TIER_APPLE_GPU, VendorProfile


class AppleProfile(VendorProfile):
    name = "apple"
    # Above the hardware vendors: on Intel Macs Apple's runtime drives AMD/Intel/NVIDIA GPUs,
    # and its quirks, not the hardware vendor's, apply.
    priority = 90

    # Apple GPUs run 32-wide SIMD groups.
    simd_width = 32
    # (Notes, no switch needed, the code always does it:) Apple exposes OpenCL 1.2 only
    # (pitfalls C1/C18): the base -cl-std=CL1.2 is exactly right. No cl_khr_fp64 on Apple GPUs
    # (pitfalls C2): DeviceInfo.has_fp64 is False and float64 raises UnsupportedError.
    # Per-kernel work-group limits are lower than the device limit (pitfalls C3): every launch
    # is sized from Program.work_group_size(name). The compiler crashes on some loops with
    # variable bounds and fails big kernels with -48 (pitfalls C4): kernels stay small.

    def matches(self, info) -> bool:
        return "apple" in (info.platform_vendor + " " + info.platform_name).lower()

    def default_rank(self, info):
        if info.type == "gpu":
            return (TIER_APPLE_GPU, 0)
        # Apple's CPU device reports work-group sizes it cannot honour and miscompiles (wrong FFT
        # results, pitfalls C3/C4); tools that "always pick the first device" failed with -54 on
        # it (pitfalls D1). Used only when asked for by name.
        return None
