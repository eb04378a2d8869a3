"""Process lifecycle: forked children and interpreter exit.

**Fork.** An OpenCL runtime's worker threads and objects do not survive ``fork()``. On PoCL,
once the parent has enumerated the devices (``clGetDeviceIDs`` starts its worker threads), any
work in a forked child waits forever, even on a context the child makes itself; Intel's CPU
runtime happened to work in our measurements (its thread pool after fork is undocumented), and
CUDA, under NVIDIA's OpenCL, does not support a child forked after it was initialised.
pyrnn_cl therefore refuses, at once and on every runtime, to open or use a device in a process
forked after it touched OpenCL devices in the parent (:func:`check_not_forked` raises
:class:`~pyrnn_cl.errors.ForkError`, like PyTorch's "Cannot re-initialize CUDA in forked
subprocess"). A child forked from a parent that never enumerated devices works normally. The
parent's objects inherited by the child are left alone: releasing them could wait on the
parent's dead threads too.

**Exit.** At interpreter exit, a daemon thread that comes back from a pyopencl call which had
released the GIL is stopped by CPython inside pyopencl's C++ code, and the process aborts
("terminate called without an active exception", status 134). Every public op is wrapped by
:func:`entry_point`, which counts the calls in progress in threads other than the main one
(the hook runs in the main thread); an ``atexit`` hook (:func:`_drain`)
lets them finish (at most :data:`EXIT_WAIT_SECONDS`) and keeps other threads from starting new
ones: a thread other than the main one that calls an op after exit began waits there until the
process is gone, instead of entering pyopencl.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
from typing import Any, Callable, TypeVar, cast

from .errors import ForkError

__all__ = ["entry_point", "mark_opencl_used", "check_not_forked", "EXIT_WAIT_SECONDS"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: How long the exit hook waits for ops still running in other threads.
EXIT_WAIT_SECONDS = 30.0

FORK_MESSAGE = (
    "pyrnn_cl cannot use OpenCL in a process made by fork() after its parent process used "
    "OpenCL devices through pyrnn_cl: the OpenCL runtime's threads and objects do not survive "
    "fork (PoCL would wait forever). Use the 'spawn' or 'forkserver' start method "
    "(multiprocessing.get_context('spawn'), torch DataLoader(multiprocessing_context='spawn')), "
    "or make the parent's first pyrnn_cl call after the fork; see README.md, 'Reliability "
    "notes'.")

# {{{ fork

_state = {"opened": False, "forked": False}


def mark_opencl_used() -> None:
    """Record that this process enumerated OpenCL devices or opened a context: a child forked
    from now on must not use OpenCL (:func:`check_not_forked`)."""
    _state["opened"] = True


def _after_fork_in_child() -> None:
    if _state["opened"]:
        _state["forked"] = True


def check_not_forked() -> None:
    """:class:`~pyrnn_cl.errors.ForkError` in a process forked after its parent used OpenCL
    devices through pyrnn_cl; nothing otherwise."""
    if _state["forked"]:
        raise ForkError(FORK_MESSAGE)


if hasattr(os, "register_at_fork"):   # POSIX; Windows has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)

# }}}

# {{{ exit

_calls = threading.Condition()
_running = {"calls": 0, "exiting": False}   # ops in progress in threads other than the main one
_depth = threading.local()
#: per thread: the device of the running op whose results stay inside pyrnn_cl (the op reads
#: them back to NumPy before it returns, or pyrnn_cl's own torch bridge reads and drops them),
#: else unset or None. ``_arrays.Call`` sets it, :func:`entry_point` restores it when the op
#: returns, ``_arrays.results_inside`` sets it around a block; read by
#: ``_arrays.results_stay``.
results_scope = threading.local()
_never = threading.Event()   # never set: where other threads wait once exit has begun


def _enter() -> None:
    """Count an op of a thread other than the main one; once exit has begun, wait forever
    instead (the thread must not enter pyopencl any more)."""
    with _calls:
        exiting = _running["exiting"]
        if not exiting:
            _running["calls"] += 1
    if exiting:
        _never.wait()


def _leave() -> None:
    with _calls:
        _running["calls"] -= 1
        _calls.notify_all()


def entry_point(func: _F) -> _F:
    """Wrap a public op: refuse it in a forked child (:func:`check_not_forked`) and, in a
    thread other than the main one, count it as running until it returns, for the exit hook.
    The main thread is not counted: the exit hook runs in it, so none of its ops is running
    then, and a ``KeyboardInterrupt`` (delivered to the main thread only) cannot leave a count
    behind. Nested ops count once. The thread's :data:`results_scope` is what it was before
    the op, once the op returns or raises."""
    @functools.wraps(func)
    def op(*args, **kwargs):
        check_not_forked()
        outer = getattr(results_scope, "device", None)
        try:
            if getattr(_depth, "n", 0) or threading.current_thread() is threading.main_thread():
                return func(*args, **kwargs)
            _enter()
            _depth.n = 1
            try:
                return func(*args, **kwargs)
            finally:
                _depth.n = 0
                _leave()
        finally:
            results_scope.device = outer
    return cast(_F, op)


#: what :func:`_drain` calls once the ops of other threads have ended (``devices`` adds the
#: finishing of its queues)
_after_drain: list[Callable[[], None]] = []


def after_drain(fn: Callable[[], None]) -> None:
    """Have the exit hook call ``fn`` after the running ops have ended (not in a forked child,
    which must not touch its parent's OpenCL objects)."""
    _after_drain.append(fn)


def _drain(timeout: float | None = None) -> bool:
    """The ``atexit`` hook: from now on other threads start no op; wait up to ``timeout``
    (default :data:`EXIT_WAIT_SECONDS`) for the running ones, then run the
    :func:`after_drain` functions: the devices' queues are finished, so that no command is
    still running when the runtime tears itself down after the interpreter (on NVIDIA's
    OpenCL, processes that exited with daemon threads' commands still queued died of SIGSEGV
    there in 2 of 3 suite runs; not yet run on a GPU with this step). Returns whether the ops
    all ended."""
    timeout = EXIT_WAIT_SECONDS if timeout is None else timeout
    with _calls:
        _running["exiting"] = True
        ended = _calls.wait_for(lambda: _running["calls"] <= 0, timeout)
    if not _state["forked"]:
        for fn in _after_drain:
            try:
                fn()
            except Exception:  # noqa: BLE001, S110 - the process is exiting: never fail here
                pass
    return ended


atexit.register(_drain)

# }}}
