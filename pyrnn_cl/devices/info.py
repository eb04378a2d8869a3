"""``DeviceInfo``: a plain, hashable description of one OpenCL device.

Everything the device layer decides (profile, ranking, spec matching, tuning, dtype checks) is a
function of a ``DeviceInfo``, so all of it can be tested with hand-written infos and no OpenCL.
:meth:`DeviceInfo.from_cl` is the only place that queries pyopencl.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyopencl as cl

__all__ = ["DeviceInfo", "parse_version"]


def parse_version(text: str, prefix: str = "") -> tuple[int, ...]:
    """The first dotted number after ``prefix`` in ``text`` as a tuple (``()`` if none).

    >>> parse_version("OpenCL 3.0 PoCL 3.1+debian  Linux", "PoCL")
    (3, 1)
    """
    pattern = re.escape(prefix) + r"\s*(\d+(?:\.\d+)*)" if prefix else r"(\d+(?:\.\d+)*)"
    match = re.search(pattern, text or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """What pyrnn_cl knows about a device (API.md §4).

    ``has_fp64``/``has_fp16`` default to what ``extensions`` reports; pass them explicitly only to
    override. ``platform_index``/``device_index`` are the positions in ``cl.get_platforms()`` and
    ``platform.get_devices()`` (``-1`` for infos not made from a live device).
    """

    platform_name: str
    platform_vendor: str = ""
    platform_version: str = ""
    name: str = ""
    vendor: str = ""
    version: str = ""
    driver_version: str = ""
    type: str = "other"
    compute_units: int = 1
    global_mem_size: int = 0
    local_mem_size: int = 0
    max_work_group_size: int = 1
    extensions: tuple[str, ...] = ()
    has_fp64: bool | None = None
    has_fp16: bool | None = None
    opencl_c_version: str = ""
    platform_index: int = -1
    device_index: int = -1
    # What the tuning defaults are derived from (pyrnn_cl.tuning.derive); 0 / () when unknown.
    native_vector_width_float: int = 0
    native_vector_width_double: int = 0
    preferred_vector_width_float: int = 0
    max_work_item_sizes: tuple[int, ...] = ()
    local_mem_type: str = ""          # "local" (dedicated), "global" (emulated) or "none"
    global_mem_cache_size: int = 0
    global_mem_cacheline_size: int = 0
    #: bytes of the level-2 cache one worker thread of a CPU device reads through: the host's
    #: (Linux sysfs; a CPU device's compute units are the host's CPUs). Not divided among the
    #: hyper-threads or cores that share it: what the kernels keep there (a recurrent weight)
    #: is the same data for all of them. OpenCL has no query for it: PoCL reports the last
    #: level as the global cache, Intel's runtime the level 2. 0 when unknown (not a CPU
    #: device, no sysfs).
    core_cache_size: int = 0
    #: bytes of the last-level cache of a CPU device's host (sysfs: ``cpu0``'s highest level,
    #: data or unified), which Intel's runtime does not report (its global cache is the level
    #: 2). 0 when unknown (not a CPU device, no sysfs).
    last_cache_size: int = 0
    #: lock-step width the device reports (NVIDIA warp, AMD wavefront, Intel sub-group sizes)
    simd_widths: tuple[int, ...] = ()
    #: 32-bit registers per work-group (NVIDIA's CL_DEVICE_REGISTERS_PER_BLOCK_NV)
    registers_per_group: int = 0

    def __post_init__(self) -> None:
        extensions = tuple(self.extensions)
        if isinstance(self.extensions, str):
            extensions = tuple(self.extensions.split())
        object.__setattr__(self, "extensions", extensions)
        if self.has_fp64 is None:
            object.__setattr__(self, "has_fp64", "cl_khr_fp64" in extensions)
        if self.has_fp16 is None:
            object.__setattr__(self, "has_fp16", "cl_khr_fp16" in extensions)
        object.__setattr__(self, "max_work_item_sizes",
                           tuple(int(v) for v in self.max_work_item_sizes))
        object.__setattr__(self, "simd_widths", tuple(int(v) for v in self.simd_widths))
        if self.type not in ("gpu", "cpu", "accelerator", "other"):
            object.__setattr__(self, "type", "other")

    # -- derived -------------------------------------------------------------------------------

    @property
    def index(self) -> str:
        """``"P:D"``, the index spec of this device (``"?:?"`` if unknown)."""
        if self.platform_index < 0 or self.device_index < 0:
            return "?:?"
        return f"{self.platform_index}:{self.device_index}"

    @property
    def opencl_c_version_tuple(self) -> tuple[int, ...]:
        """``(1, 2)`` for ``"OpenCL C 1.2 PoCL"``; ``(1, 2)`` when unknown (the safe floor)."""
        return parse_version(self.opencl_c_version, "OpenCL C") or (1, 2)

    def describe(self) -> str:
        """``"<device name> on <platform name> [P:D]"``, for messages."""
        return f"{self.name.strip()} on {self.platform_name.strip()} [{self.index}]"

    def __str__(self) -> str:
        return self.describe()

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_cl(cls, cl_device: cl.Device, platform_index: int = -1,
                device_index: int = -1) -> DeviceInfo:
        """Query a ``pyopencl.Device``; tolerant of implementations that misreport fields."""
        import pyopencl as cl

        def query(getter, default):
            try:
                value = getter()
            except Exception:  # noqa: BLE001 - a broken query must not hide the device
                return default
            return default if value is None else value

        platform = cl_device.platform
        type_bits = query(lambda: int(cl_device.type), 0)
        return cls(
            platform_name=query(lambda: platform.name, "").strip(),
            platform_vendor=query(lambda: platform.vendor, "").strip(),
            platform_version=query(lambda: platform.version, "").strip(),
            name=query(lambda: cl_device.name, "").strip(),
            vendor=query(lambda: cl_device.vendor, "").strip(),
            version=query(lambda: cl_device.version, "").strip(),
            driver_version=query(lambda: cl_device.driver_version, "").strip(),
            type=_device_type(type_bits, cl),
            compute_units=query(lambda: int(cl_device.max_compute_units), 1),
            global_mem_size=query(lambda: int(cl_device.global_mem_size), 0),
            local_mem_size=query(lambda: int(cl_device.local_mem_size), 0),
            max_work_group_size=query(lambda: int(cl_device.max_work_group_size), 1),
            extensions=tuple(query(lambda: cl_device.extensions, "").split()),
            opencl_c_version=query(lambda: cl_device.opencl_c_version, "").strip(),
            platform_index=platform_index,
            device_index=device_index,
            native_vector_width_float=query(lambda: int(cl_device.native_vector_width_float), 0),
            native_vector_width_double=query(
                lambda: int(cl_device.native_vector_width_double), 0),
            preferred_vector_width_float=query(
                lambda: int(cl_device.preferred_vector_width_float), 0),
            max_work_item_sizes=tuple(query(lambda: list(cl_device.max_work_item_sizes), [])),
            local_mem_type=_LOCAL_MEM_TYPES.get(query(lambda: int(cl_device.local_mem_type), -1),
                                                ""),
            global_mem_cache_size=query(lambda: int(cl_device.global_mem_cache_size), 0),
            global_mem_cacheline_size=query(lambda: int(cl_device.global_mem_cacheline_size), 0),
            core_cache_size=host_core_cache_size() if type_bits & cl.device_type.CPU else 0,
            last_cache_size=host_last_cache_size() if type_bits & cl.device_type.CPU else 0,
            simd_widths=_simd_widths(cl_device, query),
            # a vendor query: not a member of pyopencl's device_info enum
            registers_per_group=query(
                lambda: int(cl_device.get_info(_REGISTERS_PER_BLOCK_NV)),  # type: ignore[arg-type, call-overload]
                0),
        )


# Vendor queries (cl_nv_device_attribute_query, cl_amd_device_attribute_query,
# cl_intel_required_subgroup_size); asked only where the extension is reported.
_WARP_SIZE_NV = 0x4003
_REGISTERS_PER_BLOCK_NV = 0x4002
_WAVEFRONT_WIDTH_AMD = 0x4043
_SUB_GROUP_SIZES_INTEL = 0x4108
_LOCAL_MEM_TYPES = {0: "none", 1: "local", 2: "global"}


def _simd_widths(cl_device, query) -> tuple[int, ...]:
    """The lock-step widths a device reports through its vendor extension (``()`` if none)."""
    extensions = query(lambda: cl_device.extensions, "").split()
    for ext, param in (("cl_nv_device_attribute_query", _WARP_SIZE_NV),
                       ("cl_amd_device_attribute_query", _WAVEFRONT_WIDTH_AMD),
                       ("cl_intel_required_subgroup_size", _SUB_GROUP_SIZES_INTEL)):
        if ext in extensions:
            value = query(lambda param=param: cl_device.get_info(param), None)
            if value is None:
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            widths = tuple(int(v) for v in values if int(v) > 0)
            if widths:
                return widths
    return ()


def _host_cache_sizes(root: str) -> dict[int, int]:
    """``{level: bytes}`` of ``cpu0``'s data or unified caches under the sysfs directory
    ``root``; empty where sysfs does not say (not Linux, a container without it, an unexpected
    format)."""
    sizes: dict[int, int] = {}
    try:
        for index in sorted(pathlib.Path(root).glob("index*")):
            if (index / "type").read_text().strip() not in ("Unified", "Data"):
                continue
            sizes[int((index / "level").read_text())] = _parse_size((index / "size").read_text())
    except (OSError, ValueError):
        return {}
    return sizes


@functools.cache
def host_core_cache_size(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Bytes of the host's level-2 cache (``cpu0``'s, data or unified); 0 where sysfs does not
    say."""
    return _host_cache_sizes(root).get(2, 0)


@functools.cache
def host_last_cache_size(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Bytes of the host's last-level cache (``cpu0``'s highest level, data or unified); 0
    where sysfs does not say."""
    sizes = _host_cache_sizes(root)
    return sizes[max(sizes)] if sizes else 0


def _parse_size(text: str) -> int:
    """``"2048K"`` -> 2097152 (sysfs cache sizes: a number with an optional K, M or G)."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


def _device_type(bits: int, cl) -> str:
    """Classify a ``CL_DEVICE_TYPE`` bit field.

    Tested bit by bit instead of ``cl.device_type.to_string``: that raised for PoCL builds that do
    not describe themselves as a CPU (silx ``opencl/common.py``), and PoCL 3.1 reports bits that
    ``to_string`` renders as ``"ALL | CPU"``.
    """
    if bits & cl.device_type.GPU:
        return "gpu"
    if bits & cl.device_type.CPU:
        return "cpu"
    if bits & cl.device_type.ACCELERATOR:
        return "accelerator"
    return "other"
