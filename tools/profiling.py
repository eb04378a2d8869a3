"""Shared by the developer tools kernel_times.py and rec_sweep.py (which put the repository
root and tools/ on sys.path): a pyrnn_cl device on a profiling command queue whose kernel
launches are recorded."""

from __future__ import annotations

import sys

import pyopencl as cl


def profiling_device(spec):
    """``(device, events)``: the device ``spec`` names (``get_device``) on a new command queue
    with ``PROFILING_ENABLE``, and the list to which every kernel launch of pyrnn_cl appends
    ``(kernel name, cl.Event)`` from now on (``programs.enqueue`` wrapped wherever pyrnn_cl's
    modules imported it). The caller clears the list between the calls it times."""
    from pyrnn_cl import programs
    from pyrnn_cl.devices import Device, get_device

    base = get_device(spec)
    queue = cl.CommandQueue(base.context, base.cl_device,
                            properties=cl.command_queue_properties.PROFILING_ENABLE)
    events: list = []
    real = programs.enqueue

    def recording(q, kernel, global_size, local_size=None, **kw):
        ev = real(q, kernel, global_size, local_size, **kw)
        if isinstance(kernel, cl.Kernel):
            events.append((kernel.function_name, ev))
        return ev

    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("pyrnn_cl") and \
                getattr(mod, "enqueue", None) is real:
            mod.enqueue = recording
    return Device.from_queue(queue), events
