"""Run TensorFlow's raw block ops on the problems in an .npz and write their results.

Used by tests/test_external_tf.py in a separate interpreter that has TensorFlow
(``PYRNN_CL_TF_PYTHON``, default /opt/tfvenv/bin/python), so the test suite does not need TF.
Usage: python tf_oracle.py IN.npz OUT.npz. Every input array is named ``<case>/<argument>``;
outputs are written as ``<case>/<index>``.
"""

import sys

import numpy as np
import tensorflow as tf

raw = tf.raw_ops


def main(src, dst):
    data = np.load(src)
    cases = {}
    for key in data.files:
        case, arg = key.split("/", 1)
        cases.setdefault(case, {})[arg] = data[key]
    out = {}
    for case, a in cases.items():
        op = case.split(".")[0]
        attrs = {k[5:]: a.pop(k).item() for k in list(a) if k.startswith("attr_")}
        if op in ("BlockLSTM", "BlockLSTMV2", "BlockLSTMGrad", "BlockLSTMGradV2"):
            a["seq_len_max"] = np.int64(a["seq_len_max"])
        result = getattr(raw, op)(**a, **attrs)
        for i, r in enumerate(result):
            out[f"{case}/{i}"] = np.asarray(r)
    np.savez(dst, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
