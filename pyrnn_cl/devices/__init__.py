"""Device layer (API.md §4): find OpenCL devices, pick one, and wrap it with a vendor profile.

Example::

    from pyrnn_cl.devices import get_device
    dev = get_device()          # the default device; never prompts
    dev.info.name, dev.profile.name, dev.queue, dev.tuning("gemm")

Spec strings (``get_device(spec)``, ``PYRNN_CL_DEVICE``, ``device=`` of every op):

* ``"P:D"``: platform and device index (``"0:1"``); ``"P"`` alone: the platform's best device.
  Either part may instead be a case-insensitive substring of the platform/device name
  (``"AMD:0"``, ``"pocl:epyc"``), as in ``PYOPENCL_CTX``.
* a profile name: ``"nvidia"``, ``"amd"``, ``"apple"``, ``"intel"``, ``"pocl"``, ``"generic"``;
* ``"gpu"``, ``"cpu"`` or ``"accelerator"``;
* otherwise a case-insensitive substring of the platform or device name (``"oclgrind"``).

A spec that matches several devices gives the best-ranked one. The default device is
``PYRNN_CL_DEVICE``, else ``PYOPENCL_CTX`` (pyopencl's own parsing), else the best by ranking:
NVIDIA or AMD GPU, Apple GPU, Intel GPU, other GPU, CPU runtimes (PoCL, then Intel's), anything
else; Oclgrind and Apple's CPU device only when asked for by name.

Intel's CPU runtime installed from PyPI (``pip install "pyrnn_cl[intel]"``) is registered with
the ICD loader right before the first platform enumeration (:mod:`.runtimes`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from .. import _env, _lifecycle, tuning
from ..errors import ConfigurationError, DeviceNotFoundError, UnsupportedError
from .amd import AmdProfile
from .apple import AppleProfile
from .base import VendorProfile
from .generic import GenericProfile
from .info import DeviceInfo
from .intel import IntelProfile
from .nvidia import NvidiaProfile
from .pocl import PoclProfile

if TYPE_CHECKING:
    import pyopencl as cl
    from numpy.typing import DTypeLike

    from .._types import DeviceArg

__all__ = [
    "Device",
    "DeviceInfo",
    "VendorProfile",
    "list_devices",
    "get_device",
    "resolve_device",
    "set_default_device",
    "select_devices",
    "register_profile",
    "unregister_profile",
    "ranked_devices",
    "clear_cache",
    "profiles",
    "profile_for",
    "detected_profile",
    "rank_key",
    "INSTALL_HINT",
]

INSTALL_HINT = (
    'Install an OpenCL runtime: `pip install "pyrnn_cl[pocl]"` (PoCL CPU runtime as a wheel), '
    "`apt install pocl-opencl-icd` (Debian/Ubuntu), or your GPU vendor's OpenCL driver/ICD "
    "(NVIDIA driver, AMD ROCm, intel-opencl-icd). In a conda environment, "
    "`conda install ocl-icd-system` makes the system's ICDs visible."
)

# {{{ profiles

_PROFILES: list[VendorProfile] = []
_PROFILE_LOCK = threading.Lock()


def register_profile(profile: VendorProfile | type[VendorProfile]) -> VendorProfile:
    """Add a vendor profile (an instance or a ``VendorProfile`` subclass) and return it.

    A profile with the name of an existing one replaces it. Profiles are matched from the highest
    ``priority`` down; the generic profile (priority -1000) always matches last. Devices already
    opened keep their profile; call :func:`clear_cache` to re-resolve them.
    """
    if isinstance(profile, type):
        profile = profile()
    if not isinstance(profile, VendorProfile):
        raise TypeError(f"register_profile needs a VendorProfile, got {profile!r}")
    with _PROFILE_LOCK:
        _PROFILES[:] = [p for p in _PROFILES if p.name != profile.name]
        _PROFILES.append(profile)
        _PROFILES.sort(key=lambda p: -p.priority)
    return profile


for _cls in (PoclProfile, AppleProfile, NvidiaProfile, AmdProfile, IntelProfile, GenericProfile):
    register_profile(_cls)


def unregister_profile(name: str) -> None:
    """Remove the profile called ``name`` (no error if absent); the generic one cannot go."""
    if name == GenericProfile.name:
        raise ValueError("the generic profile is the fallback of every device; it stays")
    with _PROFILE_LOCK:
        _PROFILES[:] = [p for p in _PROFILES if p.name != name]


def profiles() -> list[VendorProfile]:
    """The registered profiles, in matching order."""
    with _PROFILE_LOCK:
        return list(_PROFILES)


def profile_for(info: DeviceInfo) -> VendorProfile:
    """The profile of ``info``: ``PYRNN_CL_PROFILE`` if set, else the first that matches.
    A name that is no profile raises :class:`~pyrnn_cl.errors.ConfigurationError`."""
    forced = _env.forced_profile()
    if forced:
        registered = profiles()
        for profile in registered:
            if profile.name == forced:
                return profile
        names = ", ".join(p.name for p in registered)
        raise ConfigurationError(f"PYRNN_CL_PROFILE={forced!r} is not a profile name (one of: "
                                 f"{names}); unset it to let each device's runtime choose")
    return detected_profile(info)


def detected_profile(info: DeviceInfo) -> VendorProfile:
    """The first registered profile that matches ``info``, whatever ``PYRNN_CL_PROFILE``
    says: the implementation a device belongs to (what a profile word in a device spec names)."""
    for profile in profiles():
        if profile.matches(info):
            return profile
    raise AssertionError("the generic profile matches every device")  # pragma: no cover


def rank_key(info: DeviceInfo) -> tuple | None:
    """Default-choice sort key of ``info`` (lower first), or ``None`` if never chosen by default."""
    rank = profile_for(info).default_rank(info)
    if rank is None:
        return None
    return (rank, info.platform_index, info.device_index)


def ranked_devices(infos: Iterable[DeviceInfo] | None = None) -> list[DeviceInfo]:
    """The devices the default choice may pick, best first (``infos`` default: every device)."""
    infos = list_devices() if infos is None else infos
    return [i for i in _ranked(infos) if rank_key(i) is not None]


def _ranked(infos):
    """``infos`` best first; devices the default choice skips go last, in index order."""
    def key(info):
        rank = rank_key(info)
        return (1, (), info.platform_index, info.device_index) if rank is None else (0, *rank)
    return sorted(infos, key=key)

# }}}

# {{{ enumeration


def _enumerate():
    """``[(DeviceInfo, cl.Device)]`` for every device of every platform; ``[]`` when none.

    No ICD (``PLATFORM_NOT_FOUND_KHR``), a broken ICD, or a missing pyopencl all give ``[]``
    rather than an exception (pitfalls C16, D5); :class:`DeviceNotFoundError` explains later.
    """
    try:
        import pyopencl as cl
    except ImportError:
        return []
    # Intel's CPU runtime from PyPI is registered with the ICD loader before its first
    # platform query (once per process; a broken install warns and changes nothing).
    from . import runtimes

    runtimes.register()
    # PoCL's workers pinned one per CPU unless the user says otherwise (read when PoCL opens)
    runtimes.pocl_thread_defaults()
    # from the first device query on, a forked child must not use OpenCL: PoCL starts its
    # worker threads here, and they do not survive fork (pyrnn_cl._lifecycle)
    _lifecycle.mark_opencl_used()
    try:
        platforms = cl.get_platforms()
    except (cl.Error, RuntimeError, OSError):
        return []
    found = []
    for p_index, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except (cl.Error, RuntimeError, OSError):
            continue  # DEVICE_NOT_FOUND on a platform with no usable device
        for d_index, cl_device in enumerate(devices):
            found.append((DeviceInfo.from_cl(cl_device, p_index, d_index), cl_device))
    return found


def list_devices() -> list[DeviceInfo]:
    """Every device of every OpenCL platform, in platform/device index order; ``[]`` when none."""
    return [info for info, _ in _enumerate()]

# }}}

# {{{ spec matching

_TYPE_WORDS = ("gpu", "cpu", "accelerator")


def _part_matches(part: str, index: int, *names: str) -> bool:
    """One side of ``"A:B"``: an index or a case-insensitive substring of one of ``names``."""
    part = part.strip()
    if part.isdigit():
        return int(part) == index
    return any(part.lower() in name.lower() for name in names)


def select_devices(spec: str, infos: Iterable[DeviceInfo] | None = None) -> list[DeviceInfo]:
    """Every device matching ``spec`` (module docstring grammar), best-ranked first.

    ``spec`` may also be a ``PYOPENCL_TEST``-style filter: ``;``-separated entries, each
    ``"platform:dev1,dev2"`` (``"0:0,1;intel:i5"``); the union is returned. An empty spec matches
    every device.
    """
    infos = list_devices() if infos is None else list(infos)
    spec = (spec or "").strip()
    if not spec:
        return _ranked(infos)
    if ";" in spec:
        chosen = []
        for entry in spec.split(";"):
            chosen += [i for i in select_devices(entry, infos) if i not in chosen]
        return chosen
    if ":" in spec:
        plat_part, dev_part = spec.split(":", 1)
        dev_parts = [d for d in dev_part.split(",") if d.strip()] or [""]
        chosen = [
            info
            for info in infos
            if (not plat_part.strip() or _part_matches(
                plat_part, info.platform_index, info.platform_name, info.platform_vendor))
            and any(
                not d.strip() or _part_matches(d, info.device_index, info.name)
                for d in dev_parts
            )
        ]
        return _ranked(chosen)
    if spec.isdigit():
        return [i for i in _ranked(infos) if i.platform_index == int(spec)]
    word = spec.lower()
    if word in {p.name for p in profiles()}:
        # Exclusive: "amd" means the AMD profile, never a CPU whose name says "AMD EPYC". The
        # word names the implementation (the detected profile) or the profile in use, so
        # PYRNN_CL_PROFILE=generic with the spec "pocl" still finds PoCL's devices.
        return _ranked([i for i in infos
                        if word in (profile_for(i).name, detected_profile(i).name)])
    if word in _TYPE_WORDS:
        return _ranked([i for i in infos if i.type == word])
    return _ranked([
        i for i in infos
        if word in i.platform_name.lower() or word in i.name.lower()
    ])


def _select_pyopencl_ctx(spec: str, infos) -> list[DeviceInfo]:
    """Devices chosen by a ``PYOPENCL_CTX`` value, parsed the way pyopencl's
    ``create_some_context`` parses it, minus the prompt: ``"A:B"``, where A is a platform index
    or name substring (empty: platform 0) and B a device index or name substring (empty: device
    0; a comma list: its first entry). pyopencl lets the *last* platform whose name contains A
    win; we keep that so both libraries pick the same device.
    """
    answers = spec.split(":")
    platforms = sorted({(i.platform_index, i.platform_name) for i in infos})
    plat_answer = answers[0].strip() if answers else ""
    plat_index = None
    if not plat_answer:
        plat_index = platforms[0][0] if platforms else None
    elif plat_answer.isdigit() and any(p == int(plat_answer) for p, _ in platforms):
        plat_index = int(plat_answer)
    else:
        for index, name in platforms:
            if plat_answer.lower() in name.lower():
                plat_index = index
    devices = [i for i in infos if i.platform_index == plat_index]
    if not devices:
        return []
    dev_answer = answers[1].split(",")[0].strip() if len(answers) > 1 else ""
    if not dev_answer:
        return devices[:1]
    if dev_answer.isdigit() and int(dev_answer) < len(devices):
        return [devices[int(dev_answer)]]
    return [i for i in devices if dev_answer.lower() in i.name.lower()][:1]

# }}}

# {{{ Device


#: The attribute of a ``pyopencl.CommandQueue`` holding its ``Device`` (queues cannot be weakly
#: referenced; the reference cycle queue <-> Device is collected with the queue).
_QUEUE_ATTR = "_pyrnn_cl_device"


def _remember(queue, device) -> None:
    try:
        setattr(queue, _QUEUE_ATTR, device)
    except (AttributeError, TypeError):   # a queue type without instance attributes
        pass


class Device:
    """One OpenCL device with its context, an in-order queue, its info and vendor profile.

    Made by :func:`get_device` (own context and queue, shared by every user of that device) or
    by :func:`resolve_device` from a user's ``pyopencl.CommandQueue`` (their context and queue,
    kept as given).
    """

    def __init__(self, cl_device: cl.Device, context: cl.Context | None = None,
                 queue: cl.CommandQueue | None = None, info: DeviceInfo | None = None) -> None:
        import pyopencl as cl

        _lifecycle.check_not_forked()
        _lifecycle.mark_opencl_used()
        self.cl_device = cl_device
        self.info = info if info is not None else DeviceInfo.from_cl(cl_device)
        self.profile = profile_for(self.info)
        self.context = context if context is not None else cl.Context([cl_device])
        if queue is None:
            queue = cl.CommandQueue(self.context, cl_device)
            _remember(queue, self)        # arrays made on this queue resolve to this device
        self.queue = queue
        self._tuning_trial = None   # pyrnn_cl.tuning.trial: the tuner's candidate values

    @classmethod
    def from_queue(cls, queue: cl.CommandQueue) -> Device:
        """The ``Device`` of a ``pyopencl.CommandQueue``: the one that made the queue, else a
        wrapper of the user's queue (its context and device used as is), made once per queue
        object, so that what a device keeps between calls (memory pools, shared zeros, build
        options) lasts as long as the queue."""
        device = getattr(queue, _QUEUE_ATTR, None)
        if device is None:
            cl_device = queue.device
            device = cls(cl_device, context=queue.context, queue=queue,
                         info=_info_for(cl_device))
            _remember(queue, device)
        return device

    @property
    def name(self) -> str:
        return self.info.name

    def check_dtype(self, dtype: DTypeLike) -> np.dtype:
        """``np.dtype(dtype)`` if this device can compute in it.

        Raises ``TypeError`` for anything but float32/float64 and :class:`UnsupportedError`
        (naming the device) for float64 on a device without ``cl_khr_fp64``.
        """
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"pyrnn_cl computes in float32 or float64, got {dtype!r}") from exc
        if dt not in (np.float32, np.float64):
            raise TypeError(f"pyrnn_cl computes in float32 or float64, got {dt}")
        if dt == np.float64 and not self.info.has_fp64:
            raise UnsupportedError(
                f"float64 needs the cl_khr_fp64 extension, which {self.info.describe()} does not "
                "report; use float32 arrays or choose another device (pyrnn-cl devices lists "
                "them with their fp64 support)"
            )
        return dt

    def tuning(self, family: str) -> dict:
        """Tuning values of a kernel family (``"gemm"``, ``"gemm_f64"``, ``"reduce"``,
        ``"recurrence"``) for this device: derived from its queries, its profile's table and a
        tuned entry (:mod:`pyrnn_cl.tuning`)."""
        return tuning.device_tuning(self, family)

    def tuning_source(self, family: str) -> str:
        """Where :meth:`tuning`'s values of ``family`` come from (``"derived"``, ...)."""
        return tuning.source(self, family)

    def __repr__(self) -> str:
        return f"<pyrnn_cl Device {self.info.describe()} profile={self.profile.name}>"

# }}}

# {{{ memoized choice

_LOCK = threading.RLock()
_by_spec: dict = {}  # (kind, spec) -> Device
_by_cl_device: dict = {}  # cl.Device int_ptr -> Device (one context per physical device)
_default: list = []  # [Device] once set_default_device was called
_infos: dict = {}  # cl.Device int_ptr -> DeviceInfo


def _info_for(cl_device) -> DeviceInfo:
    """The memoized ``DeviceInfo`` of ``cl_device``, with its platform/device indices when it is
    one of the enumerated devices (a sub-device gets ``-1`` indices)."""
    with _LOCK:
        info = _infos.get(cl_device.int_ptr)
        if info is None:
            for known, known_device in _enumerate():
                _infos.setdefault(known_device.int_ptr, known)
            info = _infos.get(cl_device.int_ptr)
            if info is None:
                info = _infos[cl_device.int_ptr] = DeviceInfo.from_cl(cl_device)
        return info


def _finish_queues() -> None:
    """Wait for every command queued on the devices chosen so far (the exit hook's last step,
    :func:`pyrnn_cl._lifecycle.after_drain`)."""
    if not _LOCK.acquire(timeout=5.0):   # (an op still running past the exit hook's wait)
        return
    try:
        devices = {id(d): d for d in [*_by_spec.values(), *_by_cl_device.values(), *_default]}
    finally:
        _LOCK.release()
    for device in devices.values():
        try:
            device.queue.finish()
        except Exception:  # noqa: BLE001, S110 - the process is exiting; the others still
            pass


_lifecycle.after_drain(_finish_queues)


def clear_cache() -> None:
    """Forget every memoized device and the default (tests; after installing a driver)."""
    with _LOCK:
        _by_spec.clear()
        _by_cl_device.clear()
        _default.clear()
        _infos.clear()


def _open_device(cl_device, info: DeviceInfo) -> Device:
    """Create the context and queue of a chosen device (replaced by a stub in tests)."""
    return Device(cl_device, info=info)


def _device_for(info: DeviceInfo, found) -> Device:
    for candidate, cl_device in found:
        if candidate == info:
            device = _by_cl_device.get(cl_device.int_ptr)
            if device is None:
                device = _by_cl_device[cl_device.int_ptr] = _open_device(cl_device, info)
            return device
    raise AssertionError("selected device vanished")  # pragma: no cover


def _not_found(what: str, infos) -> DeviceNotFoundError:
    if not infos:
        return DeviceNotFoundError(
            f"No OpenCL device found ({what}): no OpenCL platform is installed or visible. "
            + INSTALL_HINT
        )
    listing = "; ".join(
        f"[{i.index}] {i.name} on {i.platform_name} ({profile_for(i).name}, {i.type})"
        for i in infos
    )
    return DeviceNotFoundError(
        f"No OpenCL device matches {what}. Found: {listing}. Pass one of these by index "
        '("P:D") or name substring, or set PYRNN_CL_DEVICE; to add a device: ' + INSTALL_HINT
    )


def _choose(kind: str, spec: str | None) -> Device:
    """Resolve and memoize: kind is "spec" (our grammar), "ctx" (PYOPENCL_CTX) or "rank"."""
    key = (kind, spec)
    with _LOCK:
        device = _by_spec.get(key)
        if device is not None:
            return device
        found = _enumerate()
        infos = [info for info, _ in found]
        if kind == "spec":
            assert spec is not None
            chosen = select_devices(spec, infos)
            what = f"the spec {spec!r}"
        elif kind == "ctx":
            assert spec is not None
            chosen = _select_pyopencl_ctx(spec, infos)
            what = f"PYOPENCL_CTX={spec!r}"
        else:
            chosen = ranked_devices(infos)
            what = ("the default choice (devices such as Oclgrind and Apple's CPU device are "
                    "used only when asked for by name)" if infos else "the default choice")
        if not chosen:
            raise _not_found(what, infos)
        device = _by_spec[key] = _device_for(chosen[0], found)
        return device


def get_device(spec: str | None = None) -> Device:
    """The device for ``spec`` (module docstring), memoized per spec; ``None``: the default.

    Raises :class:`~pyrnn_cl.errors.DeviceNotFoundError` listing the devices found and how to
    install a runtime. In a process forked after its parent used OpenCL devices, raises
    :class:`~pyrnn_cl.errors.ForkError` (README, "Reliability notes").
    """
    _lifecycle.check_not_forked()
    if spec is None:
        with _LOCK:
            if _default:
                return _default[0]
        env_spec = _env.device_spec()
        if env_spec:
            return _choose("spec", env_spec)
        ctx = _env.pyopencl_ctx()
        if ctx is not None:
            return _choose("ctx", ctx)
        return _choose("rank", None)
    if not isinstance(spec, str):
        raise TypeError(f"a device spec is a string, got {type(spec).__name__}")
    return _choose("spec", spec.strip())


def set_default_device(spec_or_device: DeviceArg) -> Device:
    """Make ``spec_or_device`` (anything :func:`resolve_device` accepts; ``None`` resets to the
    environment/ranking choice) the default device of this process, and return it."""
    device = None if spec_or_device is None else resolve_device(spec_or_device)
    with _LOCK:
        _default.clear()
        if device is not None:
            _default.append(device)
    return device if device is not None else get_device()


def resolve_device(device: DeviceArg = None) -> Device:
    """The :class:`Device` for an op's ``device=`` argument: ``None`` (the default device), a
    ``Device``, a ``pyopencl.CommandQueue`` (wrapped, the user's queue kept) or a spec string.
    Raises :class:`~pyrnn_cl.errors.ForkError` in a process forked after its parent used
    OpenCL devices."""
    _lifecycle.check_not_forked()
    if device is None:
        return get_device()
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        return get_device(device)
    import pyopencl as cl

    if isinstance(device, cl.CommandQueue):
        return Device.from_queue(device)
    raise TypeError(
        "device must be None, a pyrnn_cl.devices.Device, a pyopencl.CommandQueue or a device "
        f"spec string, got {type(device).__name__}"
    )

# }}}
