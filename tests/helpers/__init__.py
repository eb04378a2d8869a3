"""Helpers shared by several test modules (importable because pyproject.toml's pytest
``pythonpath = ["tests"]`` puts ``tests/`` on ``sys.path``; test modules never import each
other).

Modules
-------
``device``   ``needs_fp64``, ``override_tuning``, ``track_device_arrays`` (device fixtures' kin;
             the ``device`` fixture itself is in ``tests/conftest.py``).
``compare``  dtypes as pytest parameters, their tolerances, ``rel_err`` / ``assert_close``.
``shapes``   named awkward problem shapes and random MPSGraph-dialect inputs of them.
``mps``      MPSGraph dialect: configurations, calling the library and ``mps_ref``, the full
             forward + gradient check against the reference.
``cudnn``    cuDNN dialect: problem builder, forward + backprop of the library, upstream
             gradients.
``tf``       TensorFlow block ops: inputs, BlockLSTM forward + gradient against ``tf_ref``.
``fuzz``     the malformed-input fuzzer; its op catalogue is derived from the signatures of
             ``pyrnn_cl.__all__`` (command line: ``python tools/fuzz_malformed.py``, or
             ``python -m helpers.fuzz`` from ``tests/``).

The independent float64 oracles stay in ``tests/reference/`` (``from reference import
mps_ref``): they are not helpers but the references the tests compare with.
"""
