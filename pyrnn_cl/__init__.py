"""pyrnn_cl: RNN, LSTM and GRU layers, forward and backward, in OpenCL C kernels for any OpenCL
device, with three API dialects over one engine (see README.md and API.md):

* MPSGraph-style layer ops: :func:`single_gate_rnn`, :func:`lstm`, :func:`gru` and their
  ``*_gradients``;
* TensorFlow block ops: :func:`gru_block_cell`, :func:`lstm_block_cell`, :func:`block_lstm`, ...;
* the cuDNN-style fused multi-layer op :func:`cudnn_rnn` / :func:`cudnn_rnn_backprop`.

The device layer is :mod:`pyrnn_cl.devices` (also ``pyrnn_cl.devices`` right after import).
"""

from . import devices
from ._version import __version__
from .cudnn import (
                    cudnn_rnn,
                    cudnn_rnn_backprop,
                    cudnn_rnn_canonical_to_params,
                    cudnn_rnn_params_size,
                    cudnn_rnn_params_to_canonical,
                    cudnn_rnn_reserve_space_size,
)
from .errors import BuildError, DeviceNotFoundError, ShapeError, UnsupportedError
from .mps import (
                    GRUDescriptor,
                    LSTMDescriptor,
                    SingleGateRNNDescriptor,
                    gru,
                    gru_gradients,
                    lstm,
                    lstm_gradients,
                    single_gate_rnn,
                    single_gate_rnn_gradients,
)
from .tf_ops import (
                    block_lstm,
                    block_lstm_grad,
                    block_lstm_grad_v2,
                    block_lstm_v2,
                    gru_block_cell,
                    gru_block_cell_grad,
                    gru_block_cell_weight_grads,
                    lstm_block_cell,
                    lstm_block_cell_grad,
                    lstm_block_cell_weight_grads,
)

__all__ = [
    "__version__", "devices", "BuildError", "DeviceNotFoundError", "ShapeError",
    "UnsupportedError",
    "SingleGateRNNDescriptor", "LSTMDescriptor", "GRUDescriptor", "single_gate_rnn",
    "single_gate_rnn_gradients", "lstm", "lstm_gradients", "gru", "gru_gradients",
    "gru_block_cell", "gru_block_cell_grad", "gru_block_cell_weight_grads", "lstm_block_cell",
    "lstm_block_cell_grad", "lstm_block_cell_weight_grads", "block_lstm", "block_lstm_grad",
    "block_lstm_v2", "block_lstm_grad_v2",
    "cudnn_rnn_params_size", "cudnn_rnn_canonical_to_params", "cudnn_rnn_params_to_canonical",
    "cudnn_rnn", "cudnn_rnn_backprop", "cudnn_rnn_reserve_space_size",
]
