"""The public API is annotated in full: every parameter and every return of each public function,
class and method (``pyrnn_cl.__all__``, the device layer, the converters, ``register_cell``,
the MPSGraph layer ops and the torch modules' own methods). mypy (``tox -e typecheck``, .ci/run)
checks that the annotations are right; this test keeps them there, since mypy itself does not
ask for annotations on functions outside its ``disallow_untyped_defs`` modules.

No device is needed: only signatures are read.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

import pyrnn_cl
import pyrnn_cl.cells
import pyrnn_cl.convert
import pyrnn_cl.devices
import pyrnn_cl.mps

#: (module, names) of the public API; None: the module's ``__all__``.
PUBLIC = [
    (pyrnn_cl, None),
    (pyrnn_cl.devices, None),
    (pyrnn_cl.convert, None),
    (pyrnn_cl.mps, None),
    (pyrnn_cl.cells, ["register_cell", "activation_code", "cell_kind", "gates"]),
]


def _ours(obj) -> bool:
    return getattr(obj, "__module__", "").split(".")[0] == "pyrnn_cl"


def _functions(name: str, obj):
    """``(qualified name, function)`` of ``obj`` and, for a class, of its public methods and
    ``__init__``, properties' getters and setters included; only what pyrnn_cl defines."""
    if inspect.isfunction(obj):
        yield name, obj
        return
    if not inspect.isclass(obj):
        return
    for cls in obj.__mro__:
        if not _ours(cls):
            continue
        for attr, value in vars(cls).items():
            if attr.startswith("_") and attr != "__init__":
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                for part in (value.fget, value.fset):
                    if part is not None:
                        yield f"{name}.{attr}", part
            elif inspect.isfunction(value):
                yield f"{name}.{attr}", value


def _public(module, names):
    for n in names if names is not None else module.__all__:
        obj = getattr(module, n)
        if inspect.ismodule(obj):
            continue
        yield from _functions(f"{module.__name__}.{n}", obj)


def _missing(func) -> list[str]:
    """The parameters (and ``return``) of ``func`` without an annotation; the first parameter
    of a method (``self``, ``cls``) needs none."""
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    missing = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def _unannotated(items) -> list[str]:
    return [f"{name}: {', '.join(m)}" for name, func in items if (m := _missing(func))]


def test_public_api_is_annotated():
    items = [item for module, names in PUBLIC for item in _public(module, names)]
    assert len(items) > 60, "the walk found too little: is __all__ still read?"
    assert _unannotated(items) == []


def test_torch_modules_are_annotated():
    pytest.importorskip("torch")
    bridge = importlib.import_module("pyrnn_cl.torch")
    items = list(_public(bridge, None))
    assert {name.rsplit(".", 1)[-1] for name, _ in items} >= {"forward", "cl_device",
                                                             "flatten_parameters", "__init__"}
    assert _unannotated(items) == []


def test_the_walk_sees_a_missing_annotation():
    def op(x, y: int = 0):
        return x

    class Thing:
        def __init__(self, a: int) -> None:
            self.a = a

        def method(self, b) -> int:
            return b

    Thing.__module__ = op.__module__ = "pyrnn_cl.example"
    assert _unannotated(_functions("op", op)) == ["op: x, return"]
    assert _unannotated(_functions("Thing", Thing)) == ["Thing.method: b"]
