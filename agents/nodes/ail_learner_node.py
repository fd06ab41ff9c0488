"""The adversarial learner as a program node: rounds of discriminator and
generator updates, both fed from the agent replay table.

`ail_algorithm` gives the learner node (agents/nodes/learner_node.py) an
`AILState`, two kinds of update call read as n-step windows (every step
kept, so the generator's rewards are recomputed by the current
discriminator when a batch is used), and the round plan
(`learner.RoundPlan`, a function of the two global step counts) to choose
between them: each call is a discriminator call or a generator call.

Demonstrations live on the learner, as device arrays drawn from in-graph
with the learner's PRNG key, not in a Reverb table: they never change, a
file of a few MB (20k transitions: 0.9 MB) fits any accelerator many times
over, sampling costs no RPC and no rate-limiter interplay with the agent
table, and the draws are part of the checkpointed state, so a resumed run
draws exactly the expert batches an uninterrupted one would.

The agent table is sampled by both updates; `samples_per_insert` covers
both (per round: D·discriminator batch + G·generator batch samples). With
a discriminator window (`ail.discriminator_window` N > 0) the
discriminator's agent batches come from a second table holding the newest N
transitions instead (launch/ail.py: `replay_tables`), which the round plan
paces: the agent table's ratio is then the generator's share of
`samples_per_insert`, so the generator's replay ratio is the same either
way.
"""

from __future__ import annotations

import functools
import logging

import jax

from tandem.agents.ail import demonstrations
from tandem.agents.ail import learner as ail_learner
from tandem.agents.mpo import learner as learner_lib
from tandem.agents.nodes import learner_node
from tandem.agents.replay import layouts
# The counts every row of learner.csv and discriminator.csv carries.
ROW_COUNTS = ('env_steps', 'learner_steps', 'discriminator_steps', 'round')


def discriminator_stream(ail) -> dict:
  """Where the discriminator's agent batches come from, as Update fields:
  with a window, the table of the newest rows, read one call ahead (its
  rows age while they wait); else the agent table, as the generator's."""
  if ail.discriminator_window:
    return {'table': layouts.RECENT_TABLE, 'prefetch': 1}
  return {}


def generator_share(ail, generator_batch_size: int) -> float:
  """The generator's part of the samples a round draws:
  G·B_gen / (D·B_disc + G·B_gen)."""
  gen = ail.generator_steps_per_round * generator_batch_size
  return gen / (ail.discriminator_steps_per_round * ail.batch_size + gen)


def ail_algorithm(train_config, dims) -> learner_node.Algorithm:
  """The adversarial learner: discriminator and generator (MPO) calls as the
  round plan says, on the expert demonstrations held on the device, serving
  the generator's acting policy and the discriminator."""
  tc, cfg, ail = train_config, train_config.mpo, train_config.ail
  demos = demonstrations.load_for_environment(tc.demos, tc.env)
  logging.info('learner: %d expert transitions (%d episodes) from %s',
               demos.num_transitions, demos.num_episodes, tc.demos)
  expert = ail_learner.expert_transitions(demos)
  windows = layouts.WindowLayout(dims.observation, dims.action, cfg.n_step)

  def update(kind, count, k, b, make, finite, what, **stream):
    step = make(cfg, ail)
    return learner_node.Update(
        log=kind, count=count, steps_per_call=k, batch_size=b,
        rows_to_batch=functools.partial(layouts.to_windows, layout=windows,
                                        k=k, b=b),
        apply=lambda state, batch: step(state, batch, expert),
        finite=finite, what=what, **stream)

  discriminator = update(
      'discriminator', 'discriminator_steps',
      ail.discriminator_steps_per_call, ail.batch_size,
      ail_learner.make_discriminator_update, 'discriminator_finite',
      'discriminator updates', **discriminator_stream(ail))
  generator = update(
      'learner', 'learner_steps', cfg.sgd_steps_per_call, cfg.batch_size,
      ail_learner.make_generator_update, 'finite', 'learner updates')
  def next_update(state) -> tuple:
    """The phase the round plan says is next, and the position it read."""
    before = ail_learner.position(ail, state)
    return (0 if before.phase == 'discriminator' else 1), before

  def increments(before, after, update: learner_node.Update) -> dict:
    """A call's steps, and the rounds it completed (`before`: the round
    plan's position before the call)."""
    rounds = ail_learner.position(ail, after).round - before.round
    return {update.count: update.steps_per_call, 'rounds': rounds}

  def variables(state) -> dict:
    return {'policy': jax.device_get(
                learner_lib.acting_policy(cfg, state.generator)),
            'discriminator': jax.device_get(
                (state.discriminator.params, state.discriminator.normalizer))}

  return learner_node.Algorithm(
      state=ail_learner.init(cfg, ail, dims, seed=tc.seed),
      updates=(discriminator, generator),
      next_update=next_update,
      owned_counts=lambda state: {
          'learner_steps': int(state.generator.steps),
          'discriminator_steps': int(state.discriminator.steps),
          'rounds': ail_learner.position(ail, state).round},
      increments=increments, variables=variables,
      checkpoint_step=lambda state: int(state.generator.steps),
      checkpoint_metadata={'env': tc.env,
                           'round_plan': ail_learner.plan_record(ail)},
      log_columns=ROW_COUNTS)
