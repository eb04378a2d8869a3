"""Shared by the developer tools kernel_times.py and rec_sweep.py (which put the repository
root and tools/ on sys.path): a pyrnn_cl device on a profiling command queue whose kernel
launches are recorded."""

from __future__ import annotations

import pyopencl as cl


def profiling_device(spec):
    """``(device, events)``: the device ``spec`` names (``get_device``) on a new command queue
    with ``PROFILING_ENABLE``, and the list to which every kernel launch of pyrnn_cl appends
    ``(kernel name, cl.Event)`` from now on (``programs._launch`` wrapped: the one call to the
    driver behind both ``programs.enqueue`` and the step loops' ``programs.launcher``). The
    caller clears the list between the calls it times."""
    from pyrnn_cl import programs
    from pyrnn_cl.devices import Device, get_device

    base = get_device(spec)
    queue = cl.CommandQueue(base.context, base.cl_device,
                            properties=cl.command_queue_properties.PROFILING_ENABLE)
    events: list = []
    real = programs._launch

    def recording(q, kernel, global_size, local_size, wait_for=None):
        ev = real(q, kernel, global_size, local_size, wait_for)
        if isinstance(kernel, cl.Kernel):
            events.append((kernel.function_name, ev))
        return ev

    programs._launch = recording
    return Device.from_queue(queue), events
