"""Kernel arguments by name: the tables parsed from the kernels' sources."""

import pytest

from pyrnn_cl.kernel_args import KernelSignature, kernel_signature, signatures


def test_step_kernels_have_their_step_argument_by_name():
    """Every step kernel of the engine has its step index ``s`` (the whole-sequence kernels
    ``steps``/``s_last`` in that place), parsed through the parameter macros."""
    sigs = signatures("recurrence.cl")
    for name in ("pyrnn_fwd", "pyrnn_fwd_b", "pyrnn_proj", "pyrnn_bwd", "pyrnn_bwd_b",
                 "pyrnn_bwd_proj"):
        assert sigs[name].names[sigs[name].position("s") - 1] == "rev_mask", name
    assert sigs["pyrnn_fwd_seq"].position("steps") == sigs["pyrnn_fwd"].position("s") == 5
    assert sigs["pyrnn_bwd_seq"].position("s_last") == sigs["pyrnn_bwd"].position("s")
    # FWD_PARAMS / BWD_PARAMS (and CHUNK_PARAMS inside it) expanded
    assert sigs["pyrnn_fwd"].names[-14:-6] == ("xs", "xs_sd", "wpk", "xb", "xb_off", "xb_sd",
                                                "xb_sg", "I")
    assert sigs["pyrnn_fwd"].names[-1] == sigs["pyrnn_fwd_seq"].names[-6] == "keep_sav"
    assert sigs["pyrnn_bwd"].names[-4:] == ("s_lo", "s_hi", "ring", "gring")
    assert len(set(sigs["pyrnn_bwd"].names)) == len(sigs["pyrnn_bwd"].names) == 52


def test_missing_or_unknown_arguments_are_refused():
    sig = kernel_signature("util.cl", "pyrnn_mul")
    assert sig == KernelSignature("pyrnn_mul", ("y", "a", "b"))
    assert sig.values({"b": 3, "a": 2, "y": 1}) == [1, 2, 3]
    with pytest.raises(TypeError, match=r"missing arguments \['b'\], unknown \['c'\]"):
        sig.values({"y": 1, "a": 2, "c": 3})
    with pytest.raises(KeyError, match="pyrnn_mul has no parameter 's'"):
        sig.position("s")
