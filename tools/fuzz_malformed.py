#!/usr/bin/env python3
"""Malformed-input fuzzer for every public pyrnn_cl op (pitfalls A26): the command line of
``tests/helpers/fuzz.py``, where the op catalogue (derived from the public functions'
signatures), the mutations and the crash/hang supervisor live (its docstring says what a call
must do to pass).

Usage (README, "Reliability notes")::

    python tools/fuzz_malformed.py --calls 10000 --seed 0

(or, from ``tests/``, ``python -m helpers.fuzz --calls 10000 --seed 0``).
"""

from __future__ import annotations

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fuzz():
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)       # pyrnn_cl from this checkout when it is not installed
    spec = importlib.util.spec_from_file_location(
        "pyrnn_cl_fuzz", os.path.join(ROOT, "tests", "helpers", "fuzz.py"))
    module = sys.modules["pyrnn_cl_fuzz"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(_fuzz().main())
