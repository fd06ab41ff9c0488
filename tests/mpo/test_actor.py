"""The numpy policy computes networks.apply_policy; the Actor samples from it,
clips to the box, and refreshes its parameters on schedule."""

import subprocess
import sys

import jax
import numpy as np
import pytest

from tandem.agents.mpo import actor as actor_lib
from tandem.agents.mpo import networks
from tandem.agents.mpo import numpy_policy
from tandem.agents.mpo.config import MPOConfig

CFG = MPOConfig()
SCALES = dict(init_scale=CFG.policy_init_scale,
              min_scale=CFG.policy_min_scale)


def _trained_like_params(seed, obs_dim=7, action_dim=3, layers=(32, 32, 16)):
  """Initial params with every leaf perturbed, so LayerNorm's scale and
  offset and both heads matter (at init they are 1, 0 and ~0)."""
  params = networks.init_policy(jax.random.PRNGKey(seed), obs_dim,
                                action_dim, layers)
  leaves, tree = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
  leaves = [x + 0.3 * jax.random.normal(k, x.shape)
            for x, k in zip(leaves, keys)]
  return jax.tree_util.tree_unflatten(tree, leaves)


@pytest.mark.parametrize('tanh_mean', [False, True])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_numpy_policy_matches_jax_policy(seed, tanh_mean):
  params = _trained_like_params(seed)
  p = numpy_policy.from_params(jax.device_get(params))
  rng = np.random.default_rng(seed)
  scales = dict(SCALES, tanh_mean=tanh_mean)
  # Large inputs reach tanh's saturation and ELU's negative branch.
  for scale in (0.1, 1.0, 30.0):
    obs = (scale * rng.normal(size=7)).astype(np.float32)
    mean, stddev = numpy_policy.apply_policy(p, obs, **scales)
    want = networks.apply_policy(params, obs, **scales)
    assert mean.shape == stddev.shape == (3,)
    assert mean.dtype == stddev.dtype == np.float32
    np.testing.assert_allclose(mean, want.mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stddev, want.stddev, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('tanh_mean', [False, True])
@pytest.mark.parametrize('k', [1, 3, 9])  # 9 takes the one-gemm path
def test_numpy_policy_on_a_batch_matches_jax(k, tanh_mean):
  params = _trained_like_params(4)
  p = numpy_policy.from_params(jax.device_get(params))
  obs = np.random.default_rng(k).normal(size=(k, 7)).astype(np.float32)
  scales = dict(SCALES, tanh_mean=tanh_mean)
  mean, stddev = numpy_policy.apply_policy(p, obs, **scales)
  want = networks.apply_policy(params, obs, **scales)
  assert mean.shape == stddev.shape == (k, 3)
  np.testing.assert_allclose(mean, want.mean, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(stddev, want.stddev, rtol=1e-5, atol=1e-6)


def test_numpy_policy_does_not_modify_its_input():
  p = numpy_policy.from_params(jax.device_get(_trained_like_params(0)))
  obs = np.linspace(-1, 1, 7).astype(np.float32)
  before = obs.copy()
  numpy_policy.apply_policy(p, obs, **SCALES)
  np.testing.assert_array_equal(obs, before)


def _params_with_mean(mean, stddev, obs_dim=4):
  """A policy whose output is (mean, stddev) for every observation: zero
  hidden-to-head weights, the outputs set through the head biases."""
  d = len(mean)
  params = jax.device_get(networks.init_policy(jax.random.PRNGKey(0),
                                               obs_dim, d, (8, 8)))
  params['mean'] = {'w': np.zeros((8, d), np.float32),
                    'b': np.asarray(mean, np.float32)}
  # softplus(b) · init_scale / log 2 + min_scale = stddev
  target = (np.asarray(stddev) - CFG.policy_min_scale) * np.log(2.0) / \
      CFG.policy_init_scale
  params['stddev'] = {'w': np.zeros((8, d), np.float32),
                      'b': np.log(np.expm1(target)).astype(np.float32)}
  return params


def test_deterministic_actor_returns_the_clipped_mean():
  params = _params_with_mean([0.25, -3.0, 2.0], [0.5, 0.5, 0.5])
  actor = actor_lib.Actor(CFG, params, seed=0, deterministic=True)
  action = actor.select_action(np.ones(4, np.float32))
  np.testing.assert_allclose(action, [0.25, -1.0, 1.0], rtol=1e-6)
  assert action.dtype == np.float32


def test_actor_with_a_tanh_mean_acts_at_the_squashed_mean():
  params = _params_with_mean([0.25, -3.0, 2.0], [0.5, 0.5, 0.5])
  cfg = MPOConfig(policy_mean='tanh')
  actor = actor_lib.Actor(cfg, params, seed=0, deterministic=True)
  action = actor.select_action(np.ones(4, np.float32))
  np.testing.assert_allclose(action, np.tanh([0.25, -3.0, 2.0]), rtol=1e-6)


def test_sampled_actions_follow_the_policy_and_stay_in_the_box():
  params = _params_with_mean([0.1, -0.2], [0.05, 0.2])
  actor = actor_lib.Actor(CFG, params, seed=3)
  actions = np.stack([actor.select_action(np.zeros(4, np.float32))
                      for _ in range(4000)])
  assert actions.shape == (4000, 2)
  np.testing.assert_allclose(actions.mean(0), [0.1, -0.2], atol=0.02)
  np.testing.assert_allclose(actions.std(0), [0.05, 0.2], rtol=0.05)
  wide = actor_lib.Actor(CFG, _params_with_mean([0.9], [2.0]), seed=3)
  actions = np.stack([wide.select_action(np.zeros(4, np.float32))
                      for _ in range(500)])
  assert actions.min() == -1.0 and actions.max() == 1.0


def test_batched_actions_sample_each_row():
  params = _params_with_mean([0.5, -0.5], [0.1, 0.1])
  actor = actor_lib.Actor(CFG, params, seed=0)
  actions = actor.select_action(np.zeros((3, 4), np.float32))
  assert actions.shape == (3, 2)
  assert len({tuple(a) for a in actions.tolist()}) == 3  # independent noise
  det = actor_lib.Actor(CFG, params, seed=0, deterministic=True)
  np.testing.assert_allclose(det.select_action(np.zeros((3, 4), np.float32)),
                             [[0.5, -0.5]] * 3, rtol=1e-6)


def test_same_seed_same_actions_other_seed_other_actions():
  params = _params_with_mean([0.0, 0.0], [0.3, 0.3])
  obs = np.zeros(4, np.float32)
  run = lambda seed: np.stack([
      a.select_action(obs) for a in [actor_lib.Actor(CFG, params, seed=seed)]
      for _ in range(5)])
  np.testing.assert_array_equal(run(1), run(1))
  assert not np.allclose(run(1), run(2))


def test_parameters_refresh_every_update_period_steps():
  versions = iter(range(1, 100))
  calls = []

  def source():
    calls.append(next(versions))
    return _params_with_mean([calls[-1] / 100.0], [0.1])

  actor = actor_lib.Actor(CFG, _params_with_mean([0.0], [0.1]), seed=0,
                          variable_source=source, update_period=3,
                          deterministic=True)
  obs = np.zeros(4, np.float32)
  seen = []
  for _ in range(7):
    seen.append(float(actor.select_action(obs)[0]))
    actor.update()
  assert calls == [1, 2]  # after the 3rd and the 6th step
  np.testing.assert_allclose(seen, [0, 0, 0, .01, .01, .01, .02], atol=1e-6)
  actor.update(wait=True)
  assert calls == [1, 2, 3]
  actor.update(steps=3)  # a group of 3 environments stepped once
  assert calls == [1, 2, 3, 4]


def test_actor_module_needs_no_jax():
  code = ('import sys, numpy as np\n'
          'from agents.mpo import actor\n'
          'assert "jax" not in sys.modules, "actor imported jax"\n')
  subprocess.run([sys.executable, '-c', code], check=True)
