"""Type aliases of the public API, for annotations (mypy, ``tox -e typecheck``).

Named by string so that importing this module imports neither pyopencl nor the device layer:
:mod:`pyrnn_cl.devices` uses them too, and imports pyopencl only when a device is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import numpy as np
    import pyopencl as cl
    import pyopencl.array as cla

    from .devices import Device

#: An op's array argument or result (API.md §0): a NumPy array (NumPy in, NumPy out) or a
#: ``pyopencl.array.Array`` (device arrays in, device arrays out on the same queue).
Array = Union["np.ndarray", "cla.Array"]

#: An op's ``device=`` argument, what :func:`pyrnn_cl.devices.resolve_device` accepts: None (the
#: default device), a :class:`~pyrnn_cl.devices.Device`, a ``pyopencl.CommandQueue`` or a device
#: spec string.
DeviceArg = Union["Device", "cl.CommandQueue", str, None]
