"""`networks.apply_policy` in numpy, for acting on one observation at a time.

An actor evaluates the policy once per environment step on a single
observation: ~0.2 MFLOP. Through XLA that is a ~50 µs dispatch, and XLA's
runtime threads then slow the MuJoCo step that follows; in numpy it is a few
gemv calls and ~20 elementwise ops (~15 µs), and the actor process never
starts an XLA runtime (bench/actor.py measures both). The learner keeps the
JAX definition; tests/mpo/test_actor.py holds the two to the same outputs
on random parameters and observations.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class NumpyParams(NamedTuple):
  """The policy's parameters as float32 numpy arrays, laid out for speed."""
  dense: tuple            # ((w [n_in, n_out], b [n_out]), ...) torso layers
  zeros: tuple            # ([n_out], ...) per layer after the first: ELU's
                          # bound as an array, which numpy applies faster
                          # than a Python scalar
  ln_scale: np.ndarray    # [H0]
  ln_offset: np.ndarray   # [H0]
  heads_w: np.ndarray     # [H, 2D]: the mean head's columns, then stddev's
  heads_b: np.ndarray     # [2D]


def from_params(params: dict) -> NumpyParams:
  """A `networks.init_policy` pytree (jax or numpy leaves) -> NumpyParams."""
  f = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  torso = params['torso']
  mean, stddev = params['mean'], params['stddev']
  return NumpyParams(
      dense=tuple((f(layer['w']), f(layer['b']))
                  for layer in torso['dense']),
      zeros=tuple(np.zeros(np.shape(layer['b']), np.float32)
                  for layer in torso['dense'][1:]),
      ln_scale=f(torso['ln']['scale']), ln_offset=f(torso['ln']['offset']),
      heads_w=f(np.concatenate([np.asarray(mean['w']),
                                np.asarray(stddev['w'])], axis=1)),
      heads_b=f(np.concatenate([np.asarray(mean['b']),
                                np.asarray(stddev['b'])])))


def _matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  """x [K, n] or [n] @ w [n, m]. For 2 <= K <= 8 rows, one gemv per row: the
  OpenBLAS sgemm in our stack costs ~25 µs for [K, 256] x [256, 256] whatever
  K (bench/actor.py's machine), a gemv ~3 µs."""
  if x.ndim == 1 or x.shape[0] > 8:
    return x @ w
  out = np.empty((x.shape[0], w.shape[1]), np.float32)
  for row, out_row in zip(x, out):
    np.matmul(row, w, out=out_row)
  return out


def apply_policy(p: NumpyParams, obs: np.ndarray, *, init_scale: float,
                 min_scale: float,
                 tanh_mean: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """obs [O] or [K, O] float32 -> (mean, stddev), each [D] or [K, D].

  The LayerNorm statistics are sums and dot products rather than numpy's
  mean/var (several times slower on short vectors), ELU runs in place, and
  both heads are one product.
  """
  if obs.ndim == 2 and obs.shape[0] == 1:  # the cheaper single-row path
    mean, stddev = apply_policy(p, obs[0], init_scale=init_scale,
                                min_scale=min_scale, tanh_mean=tanh_mean)
    return mean[None], stddev[None]
  w, b = p.dense[0]
  h = obs @ w
  h += b
  n = h.shape[-1]
  h -= h.sum(axis=-1, keepdims=True) / n
  if h.ndim == 1:
    h *= np.float32(1.0 / math.sqrt(float(h @ h) / n + 1e-5))
  else:
    h /= np.sqrt(np.square(h).sum(axis=-1, keepdims=True) / n + 1e-5)
  h *= p.ln_scale
  h += p.ln_offset
  np.tanh(h, out=h)
  for (w, b), zeros in zip(p.dense[1:], p.zeros):
    h = _matmul(h, w)
    h += b
    # ELU(x) = max(x, 0) + expm1(min(x, 0)): expm1 never sees a large input.
    neg = np.minimum(h, zeros)
    np.expm1(neg, out=neg)
    np.maximum(h, zeros, out=h)
    h += neg
  out = h @ p.heads_w
  out += p.heads_b
  d = out.shape[-1] // 2
  stddev = np.logaddexp(out[..., d:], np.float32(0.0))
  stddev *= np.float32(init_scale / math.log(2.0))
  stddev += np.float32(min_scale)
  mean = out[..., :d]
  if tanh_mean:
    np.tanh(mean, out=mean)
  return mean, stddev
