"""Intel's OpenCL runtimes: the GPU compute runtime (NEO) and the CPU runtime."""

from __future__ import annotations

from .base import TIER_CPU, TIER_INTEL_GPU, TIER_OTHER, VendorProfile, is_mesa


class IntelProfile(VendorProfile):
    name = "intel"
    priority = 50

    # Intel GPUs compile kernels at SIMD8/16/32; 16 is the common choice.
    simd_width = 16
    # (Note:) Gen12 iGPUs and Arc have no fp64 (the emulation is experimental and hangs the
    # iGPU), and "Double type is not supported" shows only in the build log (pitfalls C10):
    # float64 is decided from cl_khr_fp64 before building, for every device.
    # The CPU runtime narrates every build ("Compilation started", "Kernel <k> was successfully
    # vectorized (8)", "Done."): progress, not warnings.
    BENIGN_LOG_LINES = (
        r"^\s*(Compilation|Linking|Device build) (started|done)\.?\s*$",
        r"was successfully vectorized",
        r"was not vectorized",
        r"^\s*Done\.\s*$",
    )

    def matches(self, info) -> bool:
        if is_mesa(info):
            return False
        return "intel" in (info.platform_vendor + " " + info.platform_name).lower()

    def default_rank(self, info):
        if info.type == "gpu":
            return (TIER_INTEL_GPU, 0)
        if info.type == "cpu":
            return (TIER_CPU, 1)  # after PoCL (API.md §4 lists PoCL first)
        # FPGA emulation platform and other accelerators: last.
        return (TIER_OTHER, 0)
