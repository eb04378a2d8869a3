"""Load the OpenCL C sources shipped in ``pyrnn_cl/cl/`` and turn them into one compilable text.

The compiler always receives a single self-contained source (oneDNN's host-side include
expansion, style.md §1.4), so no ``-I`` path is needed and the cache key (a hash of this text)
covers every included header:

1. a header comment naming the entry file;
2. ``#pragma OPENCL EXTENSION cl_khr_fp64 : enable`` when ``PYRNN_DTYPE`` is 2 (float64);
3. the ``#define`` block, sorted by name, so the same defines always give the same text;
4. the entry file with every ``#include "x.cl"`` replaced by that file's text, each file at most
   once (include-guard semantics), with ``#line N "file"`` markers so compiler messages point
   at the original file and line (PoCL, NVIDIA, AMD, Intel and Apple accept the filename form).

``#include "x"`` is looked up next to the including file first, then in the search directories
(the package's ``cl/`` folder by default). Kernels follow CLBlast's convention: every tunable
has an ``#ifndef NAME / #define NAME default / #endif`` so each file compiles with defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

import numpy as np

__all__ = [
    "CL_DIR",
    "DTYPE_FLOAT32",
    "DTYPE_FLOAT64",
    "DTYPE_FLOAT16",
    "DTYPE_BFLOAT16",
    "STORAGE_DTYPES",
    "BFLOAT16",
    "BFLOAT16_BITS",
    "dtype_code",
    "compute_dtype",
    "storage_names",
    "find_source",
    "read_source",
    "expand_includes",
    "define_block",
    "build_source",
]

#: The package's OpenCL source folder.
CL_DIR = Path(__file__).resolve().parent / "cl"

#: Values of the ``PYRNN_DTYPE`` define. 1 and 2 are the kernels' scalar type (storage and
#: arithmetic); 3 and 4 are 16-bit storage types whose values are converted to and from float32
#: for every operation (``cl/common.h``, ``cl/storage.cl``).
DTYPE_FLOAT32 = 1
DTYPE_FLOAT64 = 2
DTYPE_FLOAT16 = 3
DTYPE_BFLOAT16 = 4


def _bfloat16():
    """``ml_dtypes.bfloat16`` as a NumPy dtype, or None when that package is not installed
    (NumPy has no bfloat16 of its own; pyrnn_cl does not depend on ml_dtypes)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


#: ``ml_dtypes.bfloat16`` as a NumPy dtype, or None without ml_dtypes.
BFLOAT16 = _bfloat16()
#: Without ml_dtypes, the container of the torch bridge's bfloat16 values: their bits in a
#: one-field structured dtype, which no NumPy number converts to by accident (a plain uint16
#: would). Not offered to NumPy users (:func:`storage_names` leaves it out). None with ml_dtypes.
BFLOAT16_BITS: np.dtype | None = None if BFLOAT16 is not None else np.dtype([("bfloat16", "<u2")])

#: Every dtype an op accepts for its floating arrays (the *storage* dtype), with its
#: ``PYRNN_DTYPE`` code and the dtype the engine computes in. float16 and bfloat16 arrays are
#: converted to float32 on the device when a call starts and its results back (round to nearest
#: even) when it ends; see README "Precision".
STORAGE_DTYPES: dict[np.dtype, tuple[int, np.dtype]] = {
    np.dtype(np.float32): (DTYPE_FLOAT32, np.dtype(np.float32)),
    np.dtype(np.float64): (DTYPE_FLOAT64, np.dtype(np.float64)),
    np.dtype(np.float16): (DTYPE_FLOAT16, np.dtype(np.float32)),
}
STORAGE_DTYPES[BFLOAT16 if BFLOAT16 is not None else cast(np.dtype, BFLOAT16_BITS)] = (
    DTYPE_BFLOAT16, np.dtype(np.float32))


def storage_names() -> str:
    """The accepted storage dtypes in words, for error messages ("float32, float64 or ...")."""
    # (not `dt != BFLOAT16_BITS`: NumPy reads None as float64 there)
    names = [str(dt) for dt in STORAGE_DTYPES if BFLOAT16_BITS is None or dt != BFLOAT16_BITS]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _storage_entry(dtype):
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"pyrnn_cl stores floating values as {storage_names()}, got "
                        f"{dtype!r}") from exc
    entry = STORAGE_DTYPES.get(dt)
    if entry is None:
        raise TypeError(f"pyrnn_cl stores floating values as {storage_names()}, got {dt}")
    return entry


def dtype_code(dtype) -> int:
    """``PYRNN_DTYPE`` value of a storage dtype (:data:`STORAGE_DTYPES`): 1 float32,
    2 float64, 3 float16, 4 bfloat16."""
    return _storage_entry(dtype)[0]


def compute_dtype(dtype) -> np.dtype:
    """The dtype the kernels compute in for storage dtype ``dtype``: float32 for float32,
    float16 and bfloat16; float64 for float64."""
    return _storage_entry(dtype)[1]


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*(?://.*|/\*.*\*/\s*)?$')
_ANY_INCLUDE = re.compile(r"^\s*#\s*include\b")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _search_dirs(source_dir) -> list[Path]:
    if source_dir is None:
        return [CL_DIR]
    if isinstance(source_dir, (str, Path)):
        return [Path(source_dir)]
    return [Path(d) for d in source_dir]


def find_source(name: str, source_dir=None, relative_to: Path | None = None) -> Path:
    """The path of source ``name``: next to ``relative_to`` first, then in the search dirs.

    Raises ``FileNotFoundError`` naming every place looked in.
    """
    candidates = []
    if relative_to is not None:
        candidates.append(relative_to.parent / name)
    candidates += [d / name for d in _search_dirs(source_dir)]
    for path in candidates:
        if path.is_file():
            return path.resolve()
    looked = ", ".join(str(p) for p in candidates)
    raise FileNotFoundError(f"OpenCL source {name!r} not found (looked in: {looked})")


def read_source(name: str, source_dir=None) -> str:
    """The text of one source file, unexpanded."""
    return find_source(name, source_dir).read_text(encoding="utf-8")


def _display_name(path: Path, source_dir) -> str:
    """``path`` relative to the first search dir containing it (for ``#line`` and messages)."""
    for base in _search_dirs(source_dir):
        try:
            return path.relative_to(base.resolve()).as_posix()
        except ValueError:
            continue
    return path.as_posix()


def _line_marker(line: int, name: str) -> str:
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'#line {line} "{escaped}"'


def expand_includes(name: str, source_dir=None,
                    prelude: Sequence[str] = ()) -> tuple[str, tuple[str, ...]]:
    """Expand ``#include "..."`` recursively, each file once, with ``#line`` markers.

    Returns ``(text, files)``: the expanded text and the display names of every file used, in
    first-use order. A file already included (or the entry file itself) expands to nothing the
    second time, like a header with an include guard. ``prelude``: files expanded, in order,
    before the entry file, as if it included them first (the engine's cell file: a path in
    the search dirs or an absolute path).
    """
    seen: list[Path] = []
    out: list[str] = []

    def expand(path: Path) -> None:
        seen.append(path)
        display = _display_name(path, source_dir)
        out.append(_line_marker(1, display))
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            match = _INCLUDE.match(line)
            if not match:
                if _ANY_INCLUDE.match(line):
                    # (left in, it would build where the compiler finds the file and fail
                    # elsewhere: Oclgrind and drivers without the include path)
                    raise ValueError(f"{display}:{number}: an #include this loader cannot "
                                     f"inline: {line.strip()!r} (write #include \"file\" "
                                     "with at most a one-line comment after it)")
                out.append(line)
                continue
            target = find_source(match.group(1), source_dir, relative_to=path)
            if target in seen:
                out.append(f"/* {line.strip()}: already included */")
                continue
            expand(target)
            out.append(_line_marker(number + 1, display))

    for first in prelude:
        path = find_source(first, source_dir)
        if path not in seen:
            expand(path)
    expand(find_source(name, source_dir))
    text = "\n".join(out) + "\n"
    return text, tuple(_display_name(p, source_dir) for p in seen)


def _define_value(name: str, value) -> str:
    if not _IDENTIFIER.match(name):
        raise ValueError(f"#define name {name!r} is not a C identifier")
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, str):
        if "\n" in value:
            raise ValueError(f"#define {name}: value must be a single line, got {value!r}")
        return value
    raise TypeError(
        f"#define {name}: values are int or str, got {type(value).__name__} ({value!r}); "
        "pass floating-point numbers as kernel arguments"
    )


def define_block(defines: Mapping[str, int | str] | None) -> str:
    """The source prefix for ``defines``: the fp64 pragma if ``PYRNN_DTYPE`` is 2, then one
    ``#define NAME value`` line per entry, sorted by name."""
    defines = dict(defines or {})
    lines = []
    if str(defines.get("PYRNN_DTYPE", "")) == str(DTYPE_FLOAT64):
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    for name in sorted(defines):
        lines.append(f"#define {name} {_define_value(name, defines[name])}".rstrip())
    return "\n".join(lines) + ("\n" if lines else "")


def build_source(
    name: str,
    defines: Mapping[str, int | str] | None = None,
    source_dir: str | Path | Sequence[str | Path] | None = None,
    prelude: Sequence[str] = (),
) -> str:
    """The complete text handed to the OpenCL compiler for entry file ``name`` (after the
    ``prelude`` files, see :func:`expand_includes`)."""
    body, _ = expand_includes(name, source_dir, prelude)
    title = " + ".join([*(Path(p).name if Path(p).is_absolute() else p for p in prelude), name])
    return f"/* pyrnn_cl: {title} */\n" + define_block(defines) + body
