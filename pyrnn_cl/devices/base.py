"""``VendorProfile``: what pyrnn_cl does differently on one family of OpenCL implementations.

A profile answers four questions about a :class:`~pyrnn_cl.devices.info.DeviceInfo`, each from data
and without touching OpenCL:

* ``matches(info)``: is this implementation ours? Profiles are tried highest ``priority`` first,
  so an implementation that runs on another vendor's hardware (PoCL-CUDA on an NVIDIA GPU, Apple's
  runtime on an AMD GPU) is claimed by the implementation's profile, not the hardware vendor's.
* ``default_rank(info)``: where the device sits in the default choice (API.md §4), or ``None``
  when it is never picked unless asked for by name.
* ``build_options(info)`` and ``filter_log(log)``: compiler options and benign log lines.
* ``table_tuning(info, family)``: the profile's measured starting points for a kernel family
  (its ``TUNING`` table: vendor default, then the longest device-name entry), applied by
  :func:`pyrnn_cl.tuning.resolve` on top of the defaults derived from the device's queries and
  below a tuned entry (CLBlast's database order, style.md §1.3).

Quirks are plain class attributes, each with a comment giving the reason, so a reader sees every
vendor difference in one short file per vendor; every attribute is read by code (the tuning
derivation reads ``simd_width``, ``prefers_explicit_vectors`` and
``specialises_per_local_size``). Behaviour that needs no switch because the code always does the
safe thing (asking each kernel's work-group limit, unconditional barriers) is described in
comments only.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from pathlib import Path

    from .info import DeviceInfo

__all__ = [
    "VendorProfile",
    "TIER_FAST_GPU",
    "TIER_APPLE_GPU",
    "TIER_INTEL_GPU",
    "TIER_OTHER_GPU",
    "TIER_CPU",
    "TIER_OTHER",
]

# Default-choice tiers (API.md §4): lower is preferred.
TIER_FAST_GPU = 0  # NVIDIA or AMD discrete/integrated GPU with the vendor's own runtime
TIER_APPLE_GPU = 1
TIER_INTEL_GPU = 2
TIER_OTHER_GPU = 3  # any other GPU (Mesa rusticl/Clover, PoCL-CUDA, Mali, Adreno, ...)
TIER_CPU = 4  # CPU runtimes: PoCL first, then Intel's CPU runtime, then others
TIER_OTHER = 5  # accelerators, FPGA emulators, unknown types

class VendorProfile:
    """Base profile; subclasses override the class attributes and, rarely, the methods."""

    #: Profile name used in specs (``get_device("pocl")``) and in ``PYRNN_CL_PROFILE``.
    name: ClassVar[str] = "base"
    #: Matching order: profiles are tried from the highest priority down.
    priority: ClassVar[int] = 0
    #: ``{key: {family: {NAME: value}}}``: measured starting points only (the defaults come
    #: from the device's queries, pyrnn_cl.tuning.derive); key ``"default"`` is the vendor
    #: default, any other key is matched as a case-insensitive substring of the device name
    #: (longest key wins).
    TUNING: ClassVar[dict[str, dict[str, dict[str, int]]]] = {}

    # -- quirks (overridden per vendor, each with its reason) ----------------------------------

    #: Threads that execute in lock-step (warp/wavefront/SIMD width) when the device does not
    #: report it through a vendor query (DeviceInfo.simd_widths); sizes GPU work-groups.
    simd_width: ClassVar[int] = 1
    #: The implementation vectorises explicit vector types (float4) rather than across
    #: work-items: kernels use one native vector per work-item and register tiles on it.
    prefers_explicit_vectors: ClassVar[bool] = False
    #: The implementation compiles a work-group function per local size at the first launch:
    #: launches use a small fixed set of explicit local sizes (:meth:`local_size`).
    specialises_per_local_size: ClassVar[bool] = False
    #: The implementation compiles a kernel's code at its first launch, not when its program
    #: is built: a program's unused kernels cost only the front end's pass over them. The
    #: engine then keeps a layer's recurrence kernels in one program per direction instead
    #: of one per part (``engine.KERNEL_PARTS``: each program build costs a front end).
    compiles_kernels_at_launch: ClassVar[bool] = False
    #: On devices of these ``DeviceInfo.type`` values the device's global memory is the host's:
    #: a map returns a pointer into the buffer, and a ``USE_HOST_PTR`` buffer works in the
    #: host's memory. The torch bridge then maps its results and wraps its inputs instead of
    #: copying them. Empty: maps and host-pointer buffers copy (a GPU), or cost more.
    shares_host_memory: ClassVar[tuple[str, ...]] = ()
    #: Regular expressions of benign build-log lines dropped before logging.
    BENIGN_LOG_LINES: ClassVar[tuple[str, ...]] = ()

    # -- matching and ranking ------------------------------------------------------------------

    def matches(self, info: DeviceInfo) -> bool:
        """True when this profile describes ``info``'s implementation."""
        return False

    def default_rank(self, info: DeviceInfo) -> tuple | None:
        """Sort key for the default choice (lower first), or ``None`` to skip the device.

        The first element is a ``TIER_*`` constant; later elements break ties inside a tier.
        """
        return (_tier_by_type(info), 2)

    # -- building ------------------------------------------------------------------------------

    #: The largest local size :meth:`local_size` gives (a power of two).
    FIXED_LOCAL_MAX: ClassVar[int] = 256

    def local_size(self, global_size: tuple[int, ...]) -> tuple[int, ...] | None:
        """The local size of a launch of ``global_size`` whose kernel needs no particular one.

        ``None`` (the implementation picks) unless it ``specialises_per_local_size``; then the
        largest power of two up to :data:`FIXED_LOCAL_MAX` that divides the first dimension,
        and 1 in the others: at most nine work-group functions per kernel, where the
        implementation's own pick (the largest divisor of each dimension) gave one per shape.
        On PoCL that was 170 functions of one copy kernel in one test run, each a compile of
        0.2-0.4 s; a scalar copy of 2^20 floats takes the same time in groups of 256 as with
        PoCL's pick (groups of one item are ~20x slower: no vectorising across work-items)."""
        if not self.specialises_per_local_size:
            return None
        g0 = int(global_size[0])
        first = min(g0 & -g0, self.FIXED_LOCAL_MAX) if g0 else 1
        return (first,) + (1,) * (len(global_size) - 1)

    def build_options(self, info: DeviceInfo) -> list[str]:
        """Compiler options for ``info``.

        Kernels are written for the OpenCL C 1.2 feature set (pitfalls C18); saying so explicitly
        keeps OpenCL 3.0 compilers from assuming optional 2.x/3.0 features. No
        ``-cl-fast-relaxed-math``: results must match the float64 reference.
        """
        if info.opencl_c_version_tuple >= (1, 2):
            return ["-cl-std=CL1.2"]
        return []

    def keeps_build_cache(self) -> bool:
        """True when the implementation caches program builds on disk itself, so that
        pyrnn_cl's binary cache (``programs.py``) would only add the cost of fetching binaries;
        read at each build (the implementation's own switch may be an environment variable)."""
        return False

    def build_cache_dir(self) -> Path | None:
        """Where the implementation caches builds itself (a ``Path``), or ``None``."""
        return None

    def filter_log(self, log: str) -> str:
        """``log`` without the lines matching :attr:`BENIGN_LOG_LINES` (and blank lines)."""
        patterns = [re.compile(p) for p in self.BENIGN_LOG_LINES]
        kept = [
            line
            for line in (log or "").splitlines()
            if line.strip() and not any(p.search(line) for p in patterns)
        ]
        return "\n".join(kept)

    # -- tuning --------------------------------------------------------------------------------

    def table_tuning(self, info: DeviceInfo, family: str) -> dict[str, int]:
        """This profile's table values of ``family`` for ``info``: the ``"default"`` entry,
        updated by the longest device-name entry matching ``info.name`` (``{}`` if none).

        Returns a fresh dict (callers may modify it).
        """
        values = dict(self.TUNING.get("default", {}).get(family, {}))
        device_name = (info.name or "").lower()
        keys = [k for k in self.TUNING if k != "default" and k.lower() in device_name]
        if keys:
            values.update(self.TUNING[max(keys, key=len)].get(family, {}))
        return values

    def __repr__(self) -> str:
        return f"<VendorProfile {self.name}>"


def _tier_by_type(info) -> int:
    """Tier of a device whose vendor gets no special place: by device type only."""
    return {"gpu": TIER_OTHER_GPU, "cpu": TIER_CPU}.get(info.type, TIER_OTHER)


def is_mesa(info) -> bool:
    """Mesa's rusticl and Clover run on AMD/Intel/NVIDIA hardware but share none of the vendor
    runtimes' behaviour, so the vendor profiles leave them to the generic one."""
    platform = (info.platform_name + " " + info.platform_vendor).lower()
    return "rusticl" in platform or "clover" in platform or "mesa" in platform
