"""PoCL, the Portable Computing Language (CPU and other back-ends)."""

from __future__ import annotations

from .. import _env
from .base import TIER_CPU, TIER_OTHER_GPU, VendorProfile
from .info import parse_version


class PoclProfile(VendorProfile):
    name = "pocl"
    # Highest: PoCL also drives NVIDIA (pocl-cuda) and Intel (level0) hardware, with PoCL's
    # behaviour rather than the vendor runtime's.
    priority = 100

    # PoCL's CPU back-end vectorises explicit vector types (float4/float8) well; its implicit
    # vectorisation across work-items ("loopvec") often fails for our kernels, so they should
    # use vector loads/arithmetic on PoCL.
    prefers_explicit_vectors = True
    # PoCL compiles a work-group function per local size at enqueue time: a launch with a new
    # local size (or local_size=None, which lets PoCL pick) costs a fresh compile. Use a small,
    # fixed set of explicit local sizes.
    specialises_per_local_size = True
    # ... and so compiles no kernel before its first launch: one recurrence program per
    # direction, not per part. Split by part, a cold not-slow suite built 1242 programs
    # instead of 1059 (476 against 269 s of builds) and took 712 against 641 s.
    compiles_kernels_at_launch = True
    # The CPU drivers' global memory is host memory, and a map returns a pointer into it: an
    # 8 MiB result mapped in 0.14 ms, read in 1.9 ms (page faults of the host copy included);
    # a USE_HOST_PTR buffer of 200 KB made in 12 us, uploaded in 73 us, used in place.
    # (Intel's CPU runtime was slower with a map than with a read: its profile keeps copies.)
    shares_host_memory = ("cpu",)
    # (No switch needed, the code always does it:) PoCL keeps its own kernel cache; pyopencl's
    # binary cache on top of it forces a second compile (inducer/pyopencl#731, pitfalls C15), so
    # programs.py builds with pyopencl's cache disabled and keeps its own. Barriers inside
    # work-item-dependent control flow have been miscompiled (pitfalls C12): every kernel keeps
    # its barriers unconditional.

    #: Substrings of ``platform_version`` marking a distribution build (Debian/Ubuntu package
    #: ``pocl-opencl-icd``, "PoCL 3.1+debian"). With two PoCL installs side by side, such a
    #: build ranks before others (pip's ``pocl-binary-distribution`` wheel) because it was the
    #: faster one on our kernels; change this data, not the code, if measurements disagree.
    #: Inside a group the newer PoCL, then the newer LLVM, wins.
    PREFERRED_BUILD_MARKERS = ("+debian", "+ubuntu", "+deb", "+fedora")

    # Starting points no device query expresses, measured with PoCL 3.1 (docs/benchmarks.md);
    # the vector widths and tiles come from the device's native width, and which R sizes run
    # whole-sequence kernels from its caches (pyrnn_cl.tuning.derive: up to 256 KiB always,
    # tiny LSTM 128/8/100 28 -> 18 us per step; larger R within one worker's cache while every
    # core gets a work-group). What the groups may stream per step together: 32 MiB (on a
    # Zen 4: LSTM 256/16/150 forward -18 %, GRU 512/16 -17 %, but LSTM 512/64, 64 MiB, 9 %
    # slower), less than the 1/1 of the last level that derive allows.
    TUNING = {
        "default": {
            "recurrence": {"REC_SEQ_STREAM_BYTES": 1 << 25},
        },
    }

    def matches(self, info) -> bool:
        platform = (info.platform_name + " " + info.platform_vendor).lower()
        return (
            "portable computing language" in platform
            or "pocl" in platform
            or "pocl" in info.platform_version.lower()
        )

    def keeps_build_cache(self) -> bool:
        """PoCL caches every program build and every work-group specialisation in its own
        directory (``POCL_CACHE_DIR``), unless ``POCL_KERNEL_CACHE=0``. Asking it for a
        program's binary (``CL_PROGRAM_BINARIES``, what pyrnn_cl's cache stores) first compiles
        every kernel of the program for a generic local size: 8.5 of the 12.7 s of a cold first
        forward+backward of a 2-layer LSTM (PoCL 3.1, 2 cores). A rebuild from source that hits
        PoCL's cache took 0.1 s in all, so pyrnn_cl's binary cache is skipped on PoCL."""
        return _env.pocl_kernel_cache()

    def build_cache_dir(self):
        return _env.pocl_cache_dir() if self.keeps_build_cache() else None

    def build_preference(self, info) -> tuple:
        """Tie-break among PoCL installs: (0 for a distribution build else 1, -version, -LLVM)."""
        version = info.platform_version
        distro = any(marker in version.lower() for marker in self.PREFERRED_BUILD_MARKERS)
        pocl_version = parse_version(version, "PoCL") or (0,)
        llvm_version = parse_version(version, "LLVM") or (0,)
        return (
            0 if distro else 1,
            tuple(-v for v in pocl_version),
            tuple(-v for v in llvm_version),
        )

    def default_rank(self, info):
        if info.type == "cpu":
            return (TIER_CPU, 0, self.build_preference(info))
        if info.type == "gpu":
            # PoCL-CUDA / level0 run GPUs slower than the vendor's runtime would.
            return (TIER_OTHER_GPU, 1, self.build_preference(info))
        return super().default_rank(info)
