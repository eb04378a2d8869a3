"""Kernel arguments by name: one table per kernel signature, read once from its ``.cl`` source.

A kernel's parameter list is parsed from the ``__kernel void name(...)`` line of its file, with
the parameter macros it uses (``FWD_PARAMS``, ``BWD_PARAMS``, ``CHUNK_PARAMS`` in
``cl/recurrence.cl``) expanded, so the host sets every argument by the name the kernel gives
it (:meth:`KernelSignature.set`) and finds the position of a per-launch argument, such as the
step index of the step loop, by name (:meth:`KernelSignature.position`). A name missing or
unknown is an error at the call, not a silently shifted argument.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from .programs import set_args
from .sources import read_source

__all__ = ["KernelSignature", "kernel_signature", "signatures"]

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(.*)$", re.M)
_KERNEL = re.compile(r"__kernel\s+void\s+([A-Za-z_]\w*)\s*\(([^)]*)\)")
_LAST_NAME = re.compile(r"([A-Za-z_]\w*)\s*$")


@dataclass(frozen=True)
class KernelSignature:
    """The parameter names of kernel ``kernel``, in order, and each one's position."""

    kernel: str
    names: tuple[str, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(self.names)})

    def position(self, name: str) -> int:
        """The position of parameter ``name`` (``KeyError`` naming the kernel if it has none)."""
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"{self.kernel} has no parameter {name!r}") from None

    def values(self, values: dict[str, object]) -> list[object]:
        """``values`` (every parameter by name, nothing else) in the kernel's order."""
        try:
            out = [values[n] for n in self.names]
        except KeyError:
            out = None
        if out is None or len(values) != len(out):     # (every name there: no other one)
            missing = [n for n in self.names if n not in values]
            unknown = [n for n in values if n not in self._index]
            raise TypeError(f"{self.kernel}: missing arguments {missing}, unknown {unknown}")
        return out

    def set(self, kernel, **values: object) -> None:
        """Set every argument of ``kernel`` (a ``pyopencl.Kernel`` of this signature) by name
        (:func:`pyrnn_cl.programs.set_args`: scalars as the NumPy types given)."""
        set_args(kernel, *self.values(values))


def _expand(params: str, macros: dict[str, str], depth: int = 0) -> list[str]:
    out: list[str] = []
    for part in params.split(","):
        part = part.strip()
        if not part:
            continue
        if part in macros:
            if depth > 8:
                raise ValueError(f"parameter macro {part} nests too deep")
            out += _expand(macros[part], macros, depth + 1)
            continue
        m = _LAST_NAME.search(part)
        if m is None:
            raise ValueError(f"cannot read a parameter name from {part!r}")
        out.append(m.group(1))
    return out


@functools.cache
def signatures(file: str) -> dict[str, KernelSignature]:
    """Every kernel signature of source ``file`` (a file of ``cl/``), by kernel name."""
    text = _COMMENT.sub(" ", read_source(file).replace("\\\n", " "))
    macros = {m.group(1): m.group(2).strip() for m in _DEFINE.finditer(text)}
    sigs: dict[str, KernelSignature] = {}
    for m in _KERNEL.finditer(text):
        sig = KernelSignature(m.group(1), tuple(_expand(m.group(2), macros)))
        if sigs.setdefault(sig.kernel, sig) != sig:
            raise ValueError(f"{file}: kernel {sig.kernel} has two different signatures")
    return sigs


def kernel_signature(file: str, kernel: str) -> KernelSignature:
    """The signature of ``kernel`` in source ``file``."""
    return signatures(file)[kernel]
