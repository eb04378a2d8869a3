"""Device memory of whole dialect calls: what grows with the sequence length.

The performance target (issue 8) bounds device allocations by the reserve space (the saved
forward values a training forward returns) plus a workspace of O(N·H·G) that does not grow with
T. These tests count every device array a call allocates (``conftest.track_device_arrays``;
inputs are device arrays uploaded before counting, so nothing is copied in) and compare the
peak for T = 6 and T = 60 with the backward chunked at 2 steps: the difference must be exactly
the growth of the call's own T-sized results (the source gradient, the outputs, the reserve
space) and nothing else, i.e. no hidden sequence-long temporary.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pyopencl.array as cla
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes as S  # noqa: E402
import test_mps as TM  # noqa: E402
from conftest import override_tuning, track_device_arrays  # noqa: E402

N, I, H = 5, 3, 8
SHORT, LONG = 6, 60


def _on_device(device, arrays):
    return {k: (cla.to_device(device.queue, np.ascontiguousarray(v)) if v is not None else None)
            for k, v in arrays.items()}


@pytest.mark.parametrize("kind", ["lstm", "rnn", "gru"])
def test_mps_gradient_grows_only_by_its_source_gradient(device, monkeypatch, kind):
    """MPSGraph gradient ops (bidirectional, input weight, mask): per extra step only the
    source gradient's ``N·I`` values are allocated. The LSTM and RNN gradients are not given
    h; the engine computes h[t-1] per chunk from the saved gates instead of rebuilding the
    h sequence."""
    override_tuning(device, monkeypatch, REC_BWD_ROWS=2 * N)
    live = track_device_arrays(monkeypatch)
    peaks = []
    for T in (SHORT, LONG):
        shape = S.Shape("mem", T=T, N=N, I=I, H=H)
        desc = TM.desc_of(kind, bidirectional=True, **TM.default_flags(kind), training=True)
        present = ("input_weight", "bias", "mask", "init_state") + (
            ("init_cell",) if kind == "lstm" else ())
        inputs = _on_device(device, S.layer_inputs(kind, shape, bidirectional=True, seed=5,
                                                   dtype=np.float32, present=present))
        saved = TM.forward(kind, inputs, TM.training_desc(kind, desc), device)
        dy, dhn, dcn = (None if a is None else cla.to_device(device.queue, a)
                        for a in TM.upstream(kind, T, N, H, 2, 7, np.float32))
        gc.collect()
        live.update(now=0, peak=0)
        out = TM.lib_gradients(kind, inputs, desc, device, dy, dhn, dcn, saved=saved)
        device.queue.finish()
        assert isinstance(out[0], cla.Array) and out[0].shape == (T, N, I)
        del out
        gc.collect()
        peaks.append(live["peak"])
    per_step = N * I * 4        # the source gradient [T][N][I], float32
    assert peaks[1] - peaks[0] == (LONG - SHORT) * per_step, (peaks, per_step)
