"""The adversarial imitation program (GAIL, AIRL): the MPO program's nodes,
with an adversarial learner and replay rows that keep every n-step.

            ┌── counter (global counts incl. discriminator steps, rounds)
actors ×N ──┤ env → policy (CPU) → window adder ──► agent table (Reverb;
            │                     n-step windows, every step kept)
            └── learner.get_variables                    │
evaluator ─ mean action: true return and learned reward  │
            vs global env steps                          ▼
learner ─ rounds: D discriminator steps (agent windows vs demonstrations
          held on the learner), then G MPO steps on rewards the current
          discriminator computes for every step of each window; with
          ail.discriminator_window N, the discriminator's agent windows come
          from a second table, `recent`, of the newest N (replay_tables)
limiter ─ at the env-step budget: learner finish + checkpoint, final eval, stop
"""

from __future__ import annotations

from typing import Optional

from tandem.agents.nodes import ail_acting
from tandem.agents.ail import learner as ail_learner
from tandem.agents.nodes import ail_learner_node
from tandem.agents.mpo import learner as learner_lib
from tandem.agents.replay import layouts
from tandem.launch import demos
from tandem.launch import mpo
from tandem.launch.config import AILTrainConfig
from tandem.launch.programs import Program

def replay_tables(tc: AILTrainConfig) -> tuple:
  """The agent table, and with a discriminator window (N > 0) a second one
  of the newest N transitions for the discriminator's agent batches. That
  one is drawn at the pace the round plan sets, so it needs no ratio of its
  own, and the agent table's ratio becomes the generator's share of
  `samples_per_insert` (and its error buffer the same share of
  `replay_error_buffer`): the generator draws as many samples per env step
  as without the window."""
  agent, = mpo.replay_tables(tc)
  window = tc.ail.discriminator_window
  if not window:
    return (agent,)
  share = ail_learner_node.generator_share(tc.ail, tc.mpo.batch_size)
  ratio = tc.samples_per_insert * share
  # The error buffer scales with the ratio, so actors may run as many env
  # steps ahead of the learner as without the window (Reverb's floor kept).
  buffer = max(tc.replay_error_buffer * share, 2.0 * max(1.0, ratio))
  return (agent._replace(samples_per_insert=ratio, error_buffer=buffer),
          layouts.TableSpec(layouts.RECENT_TABLE, max_size=window,
                            min_size=min(window, tc.replay_min_size)))


def build_program(tc: AILTrainConfig, run_dir: str, resume: bool = False,
                  *, segment: int = 1):
  return mpo.build_program(tc, run_dir, resume, segment=segment,
                           algorithm=ail_learner_node.ail_algorithm,
                           evaluator_node_cls=ail_acting.AILEvaluatorNode,
                           window_steps=True, kind='ail',
                           tables=replay_tables(tc))


def checkpoint_mismatch(tc: AILTrainConfig, metadata: dict) -> Optional[str]:
  """Why a checkpoint cannot resume under `tc`, or None: its round plan
  must be tc's (a checkpoint that records none is not checked)."""
  saved = metadata.get('round_plan') or {}
  want = ail_learner.plan_record(tc.ail)
  # Only the fields both hold: a field added to the record later must not
  # refuse the checkpoints written before it.
  differ = {k: (saved[k], want[k]) for k in saved
            if k in want and saved[k] != want[k]}
  if not differ:
    return None
  return ('its round plan differs from this config\'s: ' + ', '.join(
      f'{k} {a} there, {b} here' for k, (a, b) in differ.items()) +
          '; the rounds are counted from the steps under one plan for the '
          'whole run')


def learner_template(tc: AILTrainConfig) -> ail_learner.AILState:
  """A fresh learner state: what a checkpoint of this run restores into."""
  return ail_learner.init(tc.mpo, tc.ail, mpo.env_dims(tc.env), tc.seed)


def policy_of(cfg: AILTrainConfig, state: ail_learner.AILState):
  return learner_lib.acting_policy(cfg.mpo, state.generator)


PROGRAM = Program(
    command='train-ail', config_class=AILTrainConfig, build=build_program,
    learner_template=learner_template, policy_of=policy_of,
    checkpoint_mismatch=checkpoint_mismatch,
    local_resources=mpo.local_resources, node_names=mpo.node_names,
    check_demonstrations=demos.check_for_launch)
