"""Apple's OpenCL runtime on macOS (deprecated since 10.14, still shipped; pitfalls C1-C5)."""

from __future__ import annotations

from .base import TIER_APPLE_GPU, VendorProfile


class AppleProfile(VendorProfile):
    name = "apple"
    # Above the hardware vendors: on Intel Macs Apple's runtime drives AMD/Intel/NVIDIA GPUs,
    # and its quirks, not the hardware vendor's, apply.
    priority = 90

    # Apple exposes OpenCL 1.2 only (pitfalls C1/C18); the base -cl-std=CL1.2 is exactly right.
    max_opencl_c = (1, 2)
    # No cl_khr_fp64 on Apple GPUs (M1-M3, also Intel UHD 630 under macOS; pitfalls C2):
    # DeviceInfo.has_fp64 is False there and float64 requests raise UnsupportedError.
    gpu_has_fp64 = False
    # Per-kernel work-group limits are lower than the device limit (the CPU device allowed 128 or
    # even 1 while claiming 1024; INVALID_WORK_GROUP_SIZE on M1/M4; pitfalls C3): kernels must
    # size their launches from Program.work_group_size(name).
    kernel_wg_limit_below_device = True
    # Apple GPUs run 32-wide SIMD groups.
    simd_width = 32
    # Apple's compiler crashes on some loops with variable bounds and on functions returning
    # vectors, and fails big kernels with -48 (pitfalls C4): keep kernels small and
    # scalar-returning.
    fragile_compiler = True

    TUNING = {
        "default": {
            "gemm": {"GEMM_TM": 4, "GEMM_TN": 4, "GEMM_VW": 4, "GEMM_WG": 64},
            "recurrence": {"REC_VW": 4, "REC_NB": 4},
        },
    }

    def matches(self, info) -> bool:
        return "apple" in (info.platform_vendor + " " + info.platform_name).lower()

    def default_rank(self, info):
        if info.type == "gpu":
            return (TIER_APPLE_GPU, 0)
        # Apple's CPU device reports work-group sizes it cannot honour and miscompiles (wrong FFT
        # results, pitfalls C3/C4); tools that "always pick the first device" failed with -54 on
        # it (pitfalls D1). Used only when asked for by name.
        return None
