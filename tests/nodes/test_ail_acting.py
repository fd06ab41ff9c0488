"""The adversarial evaluator's learned rewards: one padded call per
evaluation, equal to scoring each episode on its own."""

import dataclasses

import jax
import numpy as np
import pytest

from tandem.agents.nodes import ail_acting as acting
from tandem.agents.ail import discriminator as disc
from tandem.agents.ail.config import AILConfig

OBS, ACT, GAMMA = 3, 2, 0.99


def _episodes(lengths, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for n in lengths:
    discount = np.ones(n, np.float32)
    discount[-1] = 0.0  # a terminal end, as gymnasium tasks have
    out.append({'observation': rng.normal(size=(n, OBS)).astype(np.float32),
                'action': rng.uniform(-1, 1, (n, ACT)).astype(np.float32),
                'next_observation': rng.normal(size=(n, OBS)).astype(
                    np.float32),
                'discount': discount})
  return out


@pytest.mark.parametrize('kind, reward', [('gail', 'neg_log_one_minus_d'),
                                          ('airl', 'f')])
def test_learned_rewards_match_scoring_each_episode_alone(kind, reward):
  cfg = dataclasses.replace(AILConfig(), kind=kind, reward=reward)
  params = disc.init_params(jax.random.PRNGKey(3), cfg, OBS, ACT)
  norm = disc.init_normalizer(OBS)
  fn = lambda p, nm, t: disc.rewards(cfg, p, nm, t, GAMMA)
  episodes = _episodes([5, 1, 70])
  got = acting.learned_rewards(jax.jit(fn), params, norm, episodes)
  assert [r.shape for r in got] == [(5,), (1,), (70,)]
  for ep, r in zip(episodes, got):
    alone = fn(params, norm, disc.Transitions(
        ep['observation'], ep['action'], ep['next_observation'],
        ep['discount']))
    np.testing.assert_allclose(r, np.asarray(alone), rtol=1e-5, atol=1e-6)


def test_episodes_of_many_lengths_compile_the_reward_a_few_times():
  cfg = AILConfig()
  params = disc.init_params(jax.random.PRNGKey(0), cfg, OBS, ACT)
  norm = disc.init_normalizer(OBS)
  traces = []

  def fn(p, nm, t):
    traces.append(t.observation.shape)  # runs once per compilation
    return disc.rewards(cfg, p, nm, t, GAMMA)
  jitted = jax.jit(fn)
  for total in range(1, 300, 7):  # 43 evaluations, 43 different totals
    acting.learned_rewards(jitted, params, norm,
                           _episodes([total // 2 + 1, total - total // 2]))
  # 64, 128, 256 and 512 rows: one compilation per size.
  assert sorted(s[0] for s in traces) == [64, 128, 256, 512]


def test_padded_size():
  assert [acting.padded_size(n) for n in (1, 64, 65, 128, 129, 5000)] == [
      64, 64, 128, 128, 256, 8192]


@pytest.mark.parametrize('reward', ['f', 'g', 'logit'])
def test_airl_episodes_are_scored_by_g_whatever_the_generator_trains_on(
    reward):
  # An episode's plain sum of the shaped f keeps -(1 - γ) Σ h(s_t): with h
  # shifted by a constant c the sum moves by about -(1 - γ) T c, though g,
  # and every policy's ranking, are unchanged.
  cfg = dataclasses.replace(AILConfig(), kind='airl', reward=reward)
  scored = acting.evaluation_reward(cfg)
  assert scored.reward == 'g'
  params = disc.init_params(jax.random.PRNGKey(5), cfg, OBS, ACT)
  shifted = jax.tree_util.tree_map(lambda x: x, params)
  shifted['h']['head']['b'] = params['h']['head']['b'] + 50.0
  norm = disc.init_normalizer(OBS)
  episodes = _episodes([200])
  score = lambda c, p: acting.learned_rewards(
      jax.jit(lambda q, nm, t: disc.rewards(c, q, nm, t, GAMMA)), p, norm,
      episodes)[0].sum()
  np.testing.assert_allclose(score(scored, shifted), score(scored, params),
                             rtol=1e-5)
  f = dataclasses.replace(cfg, reward='f')
  assert score(f, shifted) - score(f, params) < -50 * (1 - GAMMA) * 150


def test_gail_episodes_are_scored_by_the_generator_reward():
  for reward in ('neg_log_one_minus_d', 'log_d', 'logit'):
    cfg = dataclasses.replace(AILConfig(), kind='gail', reward=reward)
    assert acting.evaluation_reward(cfg) == cfg
