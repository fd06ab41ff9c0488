"""Behaviour cloning of the generator's mean (agents/ail/bc.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.ail import bc
from tandem.agents.ail.config import AILConfig
from tandem.agents.mpo.networks import GaussianParams


def test_weight_decays_linearly_to_zero_with_global_generator_steps():
  cfg = AILConfig(bc_weight=2.0, bc_decay_steps=100)
  got = [float(bc.weight(cfg, t)) for t in (0, 25, 50, 100, 101, 10_000)]
  assert got == pytest.approx([2.0, 1.5, 1.0, 0.0, 0.0, 0.0])
  assert float(bc.weight(AILConfig(), 0)) == 0.0   # off by default


def test_weight_decays_to_the_final_weight_and_holds_it():
  cfg = AILConfig(bc_weight=1.0, bc_decay_steps=100, bc_final_weight=0.2)
  got = [float(bc.weight(cfg, t)) for t in (0, 50, 100, 101, 10_000)]
  assert got == pytest.approx([1.0, 0.6, 0.2, 0.2, 0.2])


def test_mean_loss_against_a_hand_computed_case():
  dist = GaussianParams(mean=jnp.array([[0.0, 1.0], [0.5, -0.5]]),
                        stddev=jnp.array([[0.5, 1.0], [2.0, 0.25]]))
  action = jnp.array([[1.0, 1.0], [-0.5, 0.0]])
  # Row 0: (1/0.5)²/2 + 0 = 2; row 1: (1/2)²/2 + (0.5/0.25)²/2 = 0.125 + 2.
  assert float(bc.mean_loss(dist, action)) == pytest.approx((2 + 2.125) / 2)


def test_mean_loss_reaches_the_mean_only():
  dist = GaussianParams(mean=jnp.array([[0.2, -0.3]]),
                        stddev=jnp.array([[0.5, 0.7]]))
  action = jnp.array([[0.9, 0.1]])
  g = jax.grad(lambda d: bc.mean_loss(d, action))(dist)
  np.testing.assert_array_equal(g.stddev, 0.0)
  np.testing.assert_allclose(g.mean, (dist.mean - action) / dist.stddev ** 2,
                             rtol=1e-6)


@pytest.mark.parametrize('field, value, expected', [
    ('bc_weight', -0.1, 'a finite number >= 0'),
    ('bc_weight', float('nan'), 'a finite number >= 0'),
    ('bc_decay_steps', 0, r'an integer in \[1, 2147483647\]'),
    ('bc_final_weight', -0.1, 'a finite number >= 0'),
    ('bc_final_weight', float('inf'), 'a finite number >= 0'),
])
def test_bad_bc_values_are_refused_by_name(field, value, expected):
  with pytest.raises(ValueError, match=f'AILConfig.{field}.*{expected}'):
    AILConfig(**{field: value})


def test_a_final_weight_above_the_start_is_refused():
  # Includes bc_weight 0, which switches BC off and would ignore the floor.
  for start in (0.0, 0.5):
    with pytest.raises(ValueError,
                       match=r'AILConfig.bc_final_weight.*<= bc_weight'):
      AILConfig(bc_weight=start, bc_final_weight=0.6)


@pytest.mark.parametrize('start, path, value', [
    ({}, 'ail.bc_weight', '1.0'),
    ({}, 'ail.bc_decay_steps', '5'),
    ({'ail.bc_weight': '1.0'}, 'ail.bc_final_weight', '0.5'),
])
def test_resume_refuses_a_changed_bc_field(start, path, value):
  # The weight schedule is part of what the checkpoint's run means.
  from tandem.configs import ail as named
  from tandem.launch import config as launch_config
  from tandem.launch import resuming
  old = launch_config.apply_overrides(named.gail_cartpole(), start)
  new = launch_config.apply_overrides(old, {path: value})
  assert path not in resuming.RESUMABLE_FIELDS
  with pytest.raises(ValueError, match=path.replace('.', '\\.')):
    resuming.check_resume_overrides(old, new)


def test_a_config_file_from_before_bc_loads_with_bc_off():
  from tandem.configs import ail as named
  from tandem.launch import config as launch_config
  old = named.gail_cartpole()
  data = launch_config.to_dict(old)
  for k in ('bc_weight', 'bc_decay_steps', 'bc_final_weight'):
    del data['ail'][k]
  assert launch_config.from_dict(data) == old
