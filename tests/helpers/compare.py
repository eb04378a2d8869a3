"""Dtypes as pytest parameters, their tolerances, and the relative-error comparison of the layer
tests (``tests/test_mps.py`` and the tests that reuse its configurations).

:func:`assert_close` records the largest relative error per dtype and part in :data:`MAX_ERR`
(``tests/test_mps.py`` appends it to ``$PYRNN_CL_ERRLOG`` when set).
"""

from __future__ import annotations

import numpy as np
import pytest

F64 = pytest.param(np.float64, marks=pytest.mark.fp64, id="f64")
F32 = pytest.param(np.float32, id="f32")
F64_TOL = 1e-10
F32_TOL = {"forward": 1e-5, "gradient": 1e-4}
FD_TOL = 1e-6

#: Largest relative error seen per dtype and part (appended to $PYRNN_CL_ERRLOG when set).
MAX_ERR = {}


def rel_err(actual, expected):
    """max |actual - expected| / max |expected| (absolute where expected is all zero)."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.size == 0:
        return 0.0
    scale = float(np.max(np.abs(e)))
    return float(np.max(np.abs(a - e))) / (scale if scale > 0 else 1.0)


def assert_close(actual, expected, dtype=np.float64, what="", part="forward", tol=None):
    """Same shape and dtype, relative error within the dtype's tolerance (NaN fails)."""
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}"
    assert actual.shape == np.shape(expected), \
        f"{what}: shape {actual.shape} != expected {np.shape(expected)}"
    assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype} != {np.dtype(dtype)}"
    if tol is None:
        tol = F64_TOL if np.dtype(dtype) == np.float64 else F32_TOL[part]
    err = rel_err(actual, expected)
    key = f"{np.dtype(dtype).name} {part}"
    MAX_ERR[key] = max(MAX_ERR.get(key, 0.0), err)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.0e}"

