"""Central finite differences in float64, and a checker for analytic gradients.

The checked loss is always ``L = Σ_i sum(out_i ⊙ g_i)`` with fixed random upstream gradients
``g_i`` (one per differentiable output), so ``dL/dx`` is exactly the vector-Jacobian product that a
``*_gradients`` / ``*_grad`` / ``*_backward`` function returns when it is handed ``g_i``.

Central differences: ``dL/dx_k ≈ (L(x + ε e_k) − L(x − ε e_k)) / 2ε``; truncation error O(ε²·L'''),
round-off O(1e-16·|L|/ε); with ε = 1e-6 both stay far below 1e-7 for the O(1) losses used here.
"""
from __future__ import annotations

import numpy as np

__all__ = ["numeric_grad", "random_upstream", "weighted_loss", "check_gradients"]


def numeric_grad(f, x, eps=1e-6):
    """dL/dx of a scalar loss ``f(x)`` by central differences.

    ``x`` must be a float64 ndarray; each element is perturbed **in place** (so a closure that
    reads the same array sees the perturbation too) and restored afterwards.
    """
    if not (isinstance(x, np.ndarray) and x.dtype == np.float64):
        raise TypeError("numeric_grad needs a float64 ndarray to perturb in place")
    grad = np.zeros(x.shape)
    flat = x.reshape(-1)  # a view: x is contiguous here
    if not np.shares_memory(flat, x):
        raise ValueError("numeric_grad needs a contiguous array")
    gflat = grad.reshape(-1)
    for k in range(flat.size):
        orig = flat[k]
        flat[k] = orig + eps
        fp = f(x)
        flat[k] = orig - eps
        fm = f(x)
        flat[k] = orig
        gflat[k] = (fp - fm) / (2 * eps)
    return grad


def _as_list(outputs):
    if isinstance(outputs, np.ndarray):
        return [outputs]
    return list(outputs)


def random_upstream(outputs, seed=0):
    """One standard-normal upstream gradient per output (same shapes), from a fixed seed."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(np.shape(o)) for o in _as_list(outputs)]


def weighted_loss(outputs, upstream):
    """``L = Σ_i sum(out_i ⊙ g_i)`` (float)."""
    outs = _as_list(outputs)
    if len(outs) != len(upstream):
        raise ValueError(f"{len(outs)} outputs but {len(upstream)} upstream gradients")
    return float(sum(np.sum(np.asarray(o, dtype=np.float64) * g) for o, g in zip(outs, upstream)))


def check_gradients(forward, inputs, gradients, *, upstream=None, seed=0, eps=1e-6, tol=1e-6,
                    directions=None):
    """Check analytic gradients of ``L = Σ_i sum(out_i ⊙ g_i)`` against central differences.

    forward(inputs) -> one array or a sequence of arrays (only the differentiable outputs);
        ``inputs`` is a dict ``name -> float64 array`` that is perturbed in place during the check.
    gradients(upstream) -> dict ``name -> analytic dL/d inputs[name]`` for the given upstream list;
        every name it returns is checked (names must be keys of ``inputs``).
    upstream: the ``g_i`` (default: ``random_upstream(forward(inputs), seed)``).
    directions: ``None`` checks every element; an int k checks k random unit directions v per
        input instead (``(L(x+εv) − L(x−εv))/2ε`` vs ``⟨grad, v⟩``), for big problems.

    An input passes when ``max|analytic − numeric| ≤ tol · max(1, max|numeric|)``.  Raises
    AssertionError listing every failing input; returns ``{name: max abs error}``.
    """
    for name in list(inputs):
        inputs[name] = np.ascontiguousarray(inputs[name], dtype=np.float64)
    if upstream is None:
        upstream = random_upstream(forward(inputs), seed)
    analytic = gradients(upstream)

    def loss(_x):
        return weighted_loss(forward(inputs), upstream)

    errors, failures = {}, []
    rng = np.random.default_rng(seed + 1)
    for name, grad in analytic.items():
        x = inputs[name]
        grad = np.asarray(grad, dtype=np.float64)
        if grad.shape != x.shape:
            failures.append(f"{name}: gradient shape {grad.shape} != input shape {x.shape}")
            continue
        if directions is None:
            num, ana = numeric_grad(loss, x, eps), grad
        else:
            num, ana = np.zeros(directions), np.zeros(directions)
            orig = x.copy()
            for k in range(directions):
                v = rng.standard_normal(x.shape)
                v /= max(np.linalg.norm(v), 1e-300)
                x[...] = orig + eps * v
                fp = loss(x)
                x[...] = orig - eps * v
                fm = loss(x)
                x[...] = orig
                num[k], ana[k] = (fp - fm) / (2 * eps), np.sum(grad * v)
        err = float(np.max(np.abs(ana - num))) if num.size else 0.0
        scale = max(1.0, float(np.max(np.abs(num))) if num.size else 0.0)
        errors[name] = err
        if not err <= tol * scale:  # also catches NaN
            failures.append(f"{name}: max |analytic - numeric| = {err:.3e} (scale {scale:.3e})")
    if failures:
        raise AssertionError("gradient check failed:\n  " + "\n  ".join(failures))
    return errors
