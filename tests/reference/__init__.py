"""Independent float64 NumPy reference for pyrnn_cl's three API dialects.

Written from the equations in ``shared/reference/semantics.md`` (and the public contract in
``shared/API.md``); it never imports ``pyrnn_cl`` and shares no code with it, so kernel tests can
use it as an oracle.  Every function computes in float64 whatever dtype it is given, and accepts
(and ignores) a ``device=`` keyword so a test can call it with the library's exact arguments.

Modules
-------
``mps_ref``    MPSGraph dialect (API.md §1): ``single_gate_rnn``, ``lstm``, ``gru`` and their
               ``*_gradients`` (analytic BPTT), with descriptor dataclasses mirroring the API's.
``tf_ref``     TensorFlow block ops (API.md §2) with the correct maths (semantics.md §3, not the
               docstring errata).
``cudnn_ref``  cuDNN dialect (API.md §3): params size / canonical <-> params conversions and a
               multi-layer forward/backward with lengths, projection, skip_input and explicit
               dropout masks.
``fd``         central finite differences and a gradient checker (used by
               ``tests/test_reference.py``).
"""
