"""PoCL, the Portable Computing Language (CPU and other back-ends)."""

from __future__ import annotations

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
    # PoCL keeps its own kernel cache (~/.cache/pocl/kcache). pyopencl's binary cache on top of
    # it forces a second compile (inducer/pyopencl#731, pitfalls C15), so programs.py always
    # builds with pyopencl's cache disabled and keeps its own.
    caches_builds = True
    # Barriers inside work-item-dependent control flow and partial work-groups with local memory
    # have been miscompiled (pitfalls C12): keep barriers unconditional.
    fragile_barriers = True
    # Vector width the CPU back-end handles well (AVX2/AVX-512 fit 8 floats).
    simd_width = 8

    #: Substrings of ``platform_version`` marking a distribution build (Debian/Ubuntu package
    #: ``pocl-opencl-icd``, "PoCL 3.1+debian"). With two PoCL installs side by side, such a
    #: build ranks before others (pip's ``pocl-binary-distribution`` wheel) because it was the
    #: faster one on our kernels; change this data, not the code, if measurements disagree.
    #: Inside a group the newer PoCL, then the newer LLVM, wins.
    PREFERRED_BUILD_MARKERS = ("+debian", "+ubuntu", "+deb", "+fedora")

    TUNING = {
        "default": {
            # gemm.py's own defaults, spelled out: without an entry the generic placeholders of
            # base.DEFAULT_TUNING apply (TM=4, TN=4, VW=4, WG=64: 35-51 GFLOP/s on the RNN
            # shapes); the former entry TM=4, TN=4, VW=8, WG=16 measured about half of these
            "gemm": {"GEMM_TM": 4, "GEMM_TN": 64, "GEMM_VW": 16, "GEMM_WG": 16},
            # measured on a 2-core Zen 4 (docs/benchmarks.md): VW=16 x NB=4 x 4 gates is the
            # largest register tile without spills (NB=8 spilled: -15 %); one work-item per
            # group keeps a single specialisation per kernel; layers whose R fits 256 KiB run
            # the whole sequence in one launch (tiny LSTM 128/8/100: 28 -> 18 us per step),
            # larger ones up to 4 MiB when every core gets a work-group and the groups stream at
            # most 32 MiB of R per step (forward: LSTM 256/16/150 -18 %, GRU 512/16 -17 %,
            # LSTM 512/16 -9 %; LSTM 512/64 (64 MiB) was 9 % slower, N = 1 11 % slower)
            "recurrence": {"REC_VW": 16, "REC_NB": 4, "REC_WG": 1, "REC_SEQ_BYTES": 1 << 18,
                           "REC_SEQ_MAX_BYTES": 1 << 22, "REC_SEQ_STREAM_BYTES": 1 << 25},
        },
    }

    def matches(self, info) -> bool:
        platform = (info.platform_name + " " + info.platform_vendor).lower()
        return (
            "portable computing language" in platform
            or "pocl" in platform
            or "pocl" in info.platform_version.lower()
        )

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
