"""Intel's OpenCL runtimes: the GPU compute runtime (NEO) and the CPU runtime.

One profile name (``"intel"``, API.md §4) covers two unrelated implementations, split by
:meth:`IntelProfile.is_cpu_runtime`:

* **NEO** (platform "Intel(R) OpenCL Graphics"): GPUs; ``simd_width`` sizes their work-groups;
  ranked in the Intel-GPU tier.
* **The CPU runtime** (platform "Intel(R) OpenCL", device = the host CPU, Intel's or AMD's;
  ``pip install "pyrnn_cl[intel]"``, registered by :mod:`pyrnn_cl.devices.runtimes`): an LLVM
  compiler that vectorises across work-items and runs work-groups on TBB workers. Its tuning is
  derived from its queries like any CPU's (``pyrnn_cl.tuning``, which ignores ``simd_width`` for
  CPUs) plus the tuner; no GPU value applies to it. Ranked after PoCL among CPU runtimes, by
  measurement (:attr:`IntelProfile.CPU_RANK_NOTE`, docs/platforms.md).
* The FPGA emulation platform and other accelerators: last.
"""

from __future__ import annotations

from .base import TIER_CPU, TIER_INTEL_GPU, TIER_OTHER, VendorProfile, is_mesa


class IntelProfile(VendorProfile):
    name = "intel"
    priority = 50

    # -- NEO (GPUs) ---------------------------------------------------------------------------
    # Intel GPUs compile kernels at SIMD8/16/32; 16 is the common choice. (GPUs only: the CPU
    # runtime's work-groups follow the CPU's native vector width.)
    simd_width = 16
    # (Note:) Gen12 iGPUs and Arc have no fp64 (the emulation is experimental and hangs the
    # iGPU), and "Double type is not supported" shows only in the build log (pitfalls C10):
    # float64 is decided from cl_khr_fp64 before building, for every device.

    # -- the CPU runtime ----------------------------------------------------------------------
    # Its compiler narrates every build ("Compilation started", "Kernel <k> was successfully
    # vectorized (8)", "Done."): progress, not warnings. (No switch needed:) it compiles a
    # kernel once for every local size (no per-local-size specialisation as in PoCL), reports
    # 8192 work-items per group and fp16; it keeps no kernel cache of its own, so pyrnn_cl's
    # disk cache serves it (programs.py).
    BENIGN_LOG_LINES = (
        r"^\s*(Compilation|Linking|Device build) (started|done)\.?\s*$",
        r"was successfully vectorized",
        r"was not vectorized",
        r"^\s*Done\.\s*$",
    )
    # Starting point no device query expresses: the CPU runtime's outer GEMM kernel gathers a
    # vector that crosses n about as fast as it reads whole ones, so packing Q for it (derive's
    # GEMM_PACK_EDGE, which pays on PoCL) only costs: 1.01-1.12x slower on the weight
    # gradients of layers of H = 100 and 200 units (paired, AMD EPYC Zen 4, runtime 2026.2.0,
    # float32; float64 runs the same kernel, so its family takes the same value). (NEO's GPUs
    # derive 0 anyway.)
    TUNING = {
        "default": {
            "gemm": {"GEMM_PACK_EDGE": 0},
            "gemm_f64": {"GEMM_PACK_EDGE": 0},
        },
    }

    #: Second among CPU runtimes, after PoCL: why (shown by ``pyrnn-cl devices`` when both are
    #: present). Change the rank and this sentence together, from new measurements.
    CPU_RANK = 1
    CPU_RANK_NOTE = (
        "PoCL ranks before Intel's CPU runtime: in 3 paired `pyrnn-cl bench --quick` runs "
        "(AMD EPYC, 2 cores, AVX2) PoCL's geometric-mean speed relative to PyTorch was higher "
        "in every run, forward (0.77-0.82 against 0.67-0.76) and forward+backward (0.89-0.90 "
        "against 0.66-0.88), and on an AMD EPYC with AVX-512 over the whole CPU tier (1.04 / "
        "1.34 against 0.89 / 1.26); Intel's runtime was faster on the LSTM 512/16 forward "
        "(10-15 %, AVX2) and builds kernels 2.5x faster cold (docs/platforms.md)"
    )

    @staticmethod
    def is_cpu_runtime(info) -> bool:
        """True for the CPU runtime's device (platform "Intel(R) OpenCL", a CPU), False for
        NEO's GPUs and the FPGA emulator."""
        return info.type == "cpu"

    def matches(self, info) -> bool:
        if is_mesa(info):
            return False
        return "intel" in (info.platform_vendor + " " + info.platform_name).lower()

    def default_rank(self, info):
        if info.type == "gpu":
            return (TIER_INTEL_GPU, 0)
        if self.is_cpu_runtime(info):
            return (TIER_CPU, self.CPU_RANK)   # after PoCL's (TIER_CPU, 0, ...)
        # FPGA emulation platform and other accelerators: last.
        return (TIER_OTHER, 0)
