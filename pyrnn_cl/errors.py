"""Exception types of pyrnn_cl (API.md §0)."""

from __future__ import annotations

import os
from collections.abc import Iterable


class ShapeError(ValueError, RuntimeError):
    """A shape or rank mismatch; the message names the argument, the shape received and the shape
    expected. Also a ``RuntimeError``: what ``torch.nn`` raises for a shape mismatch, so that
    code written against torch catches the errors of :mod:`pyrnn_cl.torch`."""


class DTypeError(TypeError, ValueError, RuntimeError):
    """Tensors of one call disagree in dtype (:mod:`pyrnn_cl.torch`). A ``TypeError`` by
    pyrnn_cl's convention, and a ``ValueError`` and ``RuntimeError``: what ``torch.nn`` raises
    for the same mistake (an input whose dtype differs from the parameters', resp. an initial
    state whose dtype differs)."""


class TensorDeviceError(ValueError, RuntimeError):
    """A tensor on a torch device that :mod:`pyrnn_cl.torch` cannot read (it takes CPU tensors;
    the OpenCL device is its ``cl_device``). ``RuntimeError`` like torch.nn's device mismatch."""


class UnsupportedError(NotImplementedError):
    """A valid request that the chosen device cannot do (e.g. float64 without ``cl_khr_fp64``)."""


class ConfigurationError(ValueError):
    """An environment variable of pyrnn_cl holds a value it cannot use; the message names the
    variable, the value and what is accepted."""


class DeviceNotFoundError(RuntimeError):
    """No OpenCL device matches the request; the message lists what was found and the fix."""


class BuildError(RuntimeError):
    """An OpenCL program failed to build.

    Attributes: ``device`` (name), ``options`` (list of compiler options), ``log`` (the full build
    log), ``source`` (the expanded source) and ``saved_path`` (where that source was written).
    """

    def __init__(self, message: str, *, device: str | None = None,
                 options: Iterable[str] | None = None, log: str = "", source: str = "",
                 saved_path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.device = device
        self.options = list(options or [])
        self.log = log
        self.source = source
        self.saved_path = saved_path


class CompilerWarning(UserWarning):
    """A successful build produced a non-empty compiler log (shown only on request)."""


class TuningWarning(UserWarning):
    """A tuning entry was ignored (corrupt, foreign device, other kernel version) or a tune could
    not finish; the derived defaults apply."""


class RuntimeInstallWarning(UserWarning):
    """An OpenCL runtime installed as a Python package (Intel's CPU runtime, the ``intel``
    extra) is broken or incomplete; the message names what is missing. The other devices are
    unaffected."""


class ForkError(RuntimeError):
    """pyrnn_cl was called in a process forked after its parent used OpenCL devices (the
    runtime's threads and objects do not survive fork); the message names the fix: the
    'spawn' or 'forkserver' start method."""
