"""Device helpers for tests: skip without float64, override tuning values, count device
memory."""

from __future__ import annotations

import pytest


def needs_fp64(device) -> None:
    """Skip the calling test unless ``device`` (a ``pyrnn_cl.devices.Device``) has fp64."""
    if not device.info.has_fp64:
        pytest.skip(f"{device.info.describe()} has no cl_khr_fp64")


#: recurrence values that keep every layer on per-step kernels: a layer that runs
#: whole-sequence kernels takes one work-item per tile whatever REC_KS says, so tests of the
#: products split over REC_KS work-items set these too
PER_STEP = {"REC_SEQ_BYTES": 0, "REC_SEQ_MAX_BYTES": 0}

#: recurrence values that put a small layer (one direction's R up to 1 MiB) on the
#: whole-sequence kernels, on any device (a GPU derives REC_SEQ_BYTES = 0)
WHOLE_SEQUENCE = {"REC_SEQ_BYTES": 1 << 20}

#: recurrence values of one work-item per tile (a CPU's layout): the tile rules of
#: REC_ACC_MAX apply only there, so tests of those tiles set this on a GPU too
ONE_LANE = {"REC_KS": 1}


def override_tuning(device, monkeypatch, family="recurrence", **values):
    """Make ``device.tuning(family)`` return its profile's values updated by ``values`` for the
    rest of the test (each call starts again from the profile's own values)."""
    profile_tuning = type(device).tuning

    def tuning(fam):
        out = dict(profile_tuning(device, fam))
        if fam == family:
            out.update(values)
        return out

    monkeypatch.setattr(device, "tuning", tuning)


def fresh_allocations(monkeypatch) -> list[int]:
    """A list of the bytes of every device array allocated from now on without the pool: a
    ``pyopencl.array.Array`` made without existing data (``empty``, ``zeros``, ``to_device``,
    copies). Buffers made with their values (``copied_at_creation``), pooled arrays, views and
    sub-buffers are not such allocations."""
    import pyopencl.array as cla

    fresh: list[int] = []
    init = cla.Array.__init__

    def tracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if kwargs.get("data", args[5] if len(args) > 5 else None) is None and self.nbytes:
            fresh.append(self.nbytes)

    monkeypatch.setattr(cla.Array, "__init__", tracked)
    return fresh


def track_device_arrays(monkeypatch):
    """Count the bytes of every device array allocated from now on (``pyopencl.array.Array``
    created without existing data: ``empty``, ``zeros``, ``to_device``, copies; views and
    sub-buffers are not allocations) while it lives. The library's pooled temporaries are
    allocated plainly meanwhile, so they count too. Returns a dict whose ``now``/``peak`` the
    caller may reset; ``peak`` is the most bytes alive at once."""
    import weakref

    import pyopencl.array as cla

    from pyrnn_cl import _arrays, engine, gemm

    def temporary(device, shape, dtype):
        return _arrays.empty(device.queue, shape, dtype)

    for module in (_arrays, engine, gemm):
        monkeypatch.setattr(module, "temporary", temporary)
    live = {"now": 0, "peak": 0}
    init = cla.Array.__init__

    def release(size):
        live["now"] -= size

    def tracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        data = kwargs.get("data", args[5] if len(args) > 5 else None)
        if data is None and self.nbytes:
            live["now"] += self.nbytes
            live["peak"] = max(live["peak"], live["now"])
            weakref.finalize(self, release, self.nbytes)

    monkeypatch.setattr(cla.Array, "__init__", tracked)
    return live
