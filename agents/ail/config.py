"""Adversarial imitation configuration: a frozen, validated dataclass.

The discriminator's side of a GAIL or AIRL run; the generator is MPO, with
its own `MPOConfig`. Rounds are counted in SGD steps: each round runs
`discriminator_steps_per_round` discriminator updates, then
`generator_steps_per_round` MPO updates. Both learning-rate schedules are
functions of global step counts (the discriminator's over
`schedule_horizon` discriminator steps), never of a round.
"""

from __future__ import annotations

import dataclasses
import math

from tandem.agents.core import fields
from tandem.agents.mpo.config import (DUAL_OPTIMIZERS, OptimizerConfig,
                                      optimizer_field)

KINDS = ('gail', 'airl')
# GAIL (Ho & Ermon 2016) with D = σ(logit) the probability of "expert":
#   neg_log_one_minus_d: -log(1 - D)   (positive; Ho & Ermon's cost log(1 - D)
#                                        with its sign flipped into a reward.
#                                        DAC's paper writes this form; its
#                                        code defaults to the raw logit)
#   log_d:               log D          (negative: a per-step survival cost)
#   logit:               log D - log(1 - D)
# AIRL (Fu et al. 2018): f (the shaped f(s,a,s')), g (the state(-action)
# reward term alone), or logit = f - log π(a|s) (their generator reward: f
# plus an entropy bonus under the current policy), which the MPO generator
# learns in soft actor-critic's form (ail/learner.py, soft_terms).
REWARDS = {'gail': ('neg_log_one_minus_d', 'log_d', 'logit'),
           'airl': ('f', 'g', 'logit')}
# state_action: GAIL sees (s, a); AIRL's g sees (s, a).
# state_next_state: GAIL sees (s, s'); AIRL's g sees s alone (the state-only
# reward of Fu et al. 2018, Sec. 5), its shaping term h always s and s'.
# state: GAIL sees s alone (state-marginal matching: no trace of the agent's
# action noise reaches it); AIRL's g sees s, as with state_next_state.
INPUTS = ('state_action', 'state_next_state', 'state')
# DAC's absorbing states (Kostrikov et al. 2019, Sec. 4.2): 'on' gives the
# discriminator an absorbing indicator and makes the generator bootstrap
# through the absorbing state after a terminal step; 'auto' is on where the
# run's task may terminate (`task_may_terminate`, which AILTrainConfig sets
# from its `env`).
ABSORBING = ('auto', 'on', 'off')
# What the gradient penalty differentiates: 'score', the discriminator's
# score (GAIL's logit, AIRL's f = g + γ h(s') - h(s)); 'g', AIRL's reward
# term g alone, leaving the shaping term h unconstrained.
PENALTY_ON = ('score', 'g')
# Where the gradient penalty takes its gradients: 'interpolates', at random
# points between paired expert and agent inputs (Gulrajani et al. 2017, as
# DAC uses it); 'expert', at the expert's inputs alone (with target 0 the R1
# penalty of Mescheder et al. 2018), which penalises the score's slope where
# the expert is, not on the way there (though a network's slope elsewhere
# moves with it: on point_mass it flattened f as much, BENCHMARKS.md).
PENALTY_AT = ('interpolates', 'expert')


def discriminator_optimizer(name: str = 'adam', learning_rate: float = 3e-4,
                            **kw) -> OptimizerConfig:
  return OptimizerConfig(name, learning_rate,
                         owner='AILConfig.discriminator_optimizer',
                         choices=DUAL_OPTIMIZERS, **kw)


@dataclasses.dataclass(frozen=True)
class AILConfig:
  """GAIL / AIRL discriminator and the round structure."""
  kind: str = 'gail'
  reward: str = 'neg_log_one_minus_d'
  input: str = 'state_action'
  layers: tuple = (64, 64)
  discriminator_optimizer: OptimizerConfig = dataclasses.field(
      default_factory=discriminator_optimizer)
  batch_size: int = 256               # agent and expert samples, each
  # Gradient penalty weight λ (Gulrajani et al. 2017, as DAC uses it); 0: off.
  gradient_penalty: float = 10.0
  # The input-gradient norm the penalty pulls toward: 1 (Gulrajani et al.
  # 2017) or 0 (zero-centred, which makes a flat score its optimum: Mescheder
  # et al. 2018; Thanh-Tung et al. 2019).
  gradient_penalty_target: float = 1.0
  gradient_penalty_on: str = 'score'   # PENALTY_ON
  gradient_penalty_at: str = 'interpolates'   # PENALTY_AT
  normalize_inputs: bool = True
  # Normalised observations are clipped to ±this many standard deviations.
  normalizer_clip: float = 5.0
  discriminator_steps_per_round: int = 1
  discriminator_steps_per_call: int = 1
  generator_steps_per_round: int = 8
  # Discriminator steps over which its learning-rate schedule runs; 0: the
  # steps the run's budget pays for, which the launch sets when it creates
  # the run (a learner needs the count).
  schedule_horizon: int = 1_000_000
  # Behaviour cloning of the policy mean on expert batches, added to the
  # generator's policy loss with a weight falling linearly from bc_weight to
  # bc_final_weight over bc_decay_steps global generator steps, then held
  # (agents/ail/bc.py; DAPG, Rajeswaran et al. 2018). bc_weight 0: off.
  bc_weight: float = 0.0
  bc_decay_steps: int = 10_000
  bc_final_weight: float = 0.0
  absorbing_states: str = 'auto'
  # Where the discriminator's agent batch comes from: 0, the whole agent
  # replay (as the generator's); N, uniformly from the newest N transitions
  # only (a second replay table, first in first out). AIRL's
  # D = exp f / (exp f + π) holds for samples of the current policy; the
  # replay holds those of every past one.
  discriminator_window: int = 0
  # Whether the run's task may end in a terminal state: bookkeeping that
  # AILTrainConfig derives from its env on every construction (so an
  # overridden env counts), never a setting, nor stored in config.json.
  task_may_terminate: bool = False

  @property
  def absorbing(self) -> bool:
    """Whether this run uses absorbing states ('auto': where the task may
    terminate)."""
    return self.absorbing_states == 'on' or (
        self.absorbing_states == 'auto' and self.task_may_terminate)

  def __post_init__(self):
    o = 'AILConfig'
    fields.one_of(o, 'kind', self.kind, KINDS)
    fields.one_of(o, 'reward', self.reward, REWARDS[self.kind])
    fields.one_of(o, 'input', self.input, INPUTS)
    fields.one_of(o, 'absorbing_states', self.absorbing_states, ABSORBING)
    if not isinstance(self.task_may_terminate, bool):
      fields.fail(o, 'task_may_terminate', 'true or false',
                  self.task_may_terminate)
    object.__setattr__(self, 'layers', fields.layers(o, 'layers', self.layers))
    optimizer_field(o, 'discriminator_optimizer',
                     self.discriminator_optimizer, DUAL_OPTIMIZERS)
    fields.int_at_least(o, 'batch_size', self.batch_size, 1)
    fields.non_negative(o, 'gradient_penalty', self.gradient_penalty)
    fields.non_negative(o, 'gradient_penalty_target',
                        self.gradient_penalty_target)
    fields.one_of(o, 'gradient_penalty_on', self.gradient_penalty_on,
                  PENALTY_ON)
    fields.one_of(o, 'gradient_penalty_at', self.gradient_penalty_at,
                  PENALTY_AT)
    if self.gradient_penalty_on == 'g' and self.kind != 'airl':
      fields.fail(o, 'gradient_penalty_on', "'score' (GAIL has no g)",
                  self.gradient_penalty_on)
    if not isinstance(self.normalize_inputs, bool):
      fields.fail(o, 'normalize_inputs', 'true or false', self.normalize_inputs)
    if not (isinstance(self.normalizer_clip, (int, float)) and
            not isinstance(self.normalizer_clip, bool) and
            math.isfinite(self.normalizer_clip) and self.normalizer_clip > 0):
      fields.fail(o, 'normalizer_clip', 'a finite number > 0', self.normalizer_clip)
    fields.step_count(o, 'discriminator_steps_per_round',
                self.discriminator_steps_per_round)
    fields.int_at_least(o, 'discriminator_steps_per_call',
                  self.discriminator_steps_per_call, 1)
    fields.step_count(o, 'generator_steps_per_round',
                self.generator_steps_per_round)
    fields.schedule_horizon(o, self.schedule_horizon)
    fields.int_at_least(o, 'discriminator_window', self.discriminator_window,
                        0)
    if 0 < self.discriminator_window < self.batch_size:
      fields.fail(o, 'discriminator_window',
                  f'0 (the whole replay) or at least batch_size='
                  f'{self.batch_size} transitions', self.discriminator_window)
    fields.non_negative(o, 'bc_weight', self.bc_weight)
    fields.step_count(o, 'bc_decay_steps', self.bc_decay_steps)
    fields.non_negative(o, 'bc_final_weight', self.bc_final_weight)
    # A floor above the start would make the "decay" a rise, and a floor
    # with bc_weight 0 would be ignored, since 0 switches BC off.
    if self.bc_final_weight > self.bc_weight:
      fields.fail(o, 'bc_final_weight', f'a number <= bc_weight={self.bc_weight}',
            self.bc_final_weight)
    # A call never straddles two phases, so a checkpoint (taken between
    # calls) always lands on a step boundary the round plan knows.
    if self.discriminator_steps_per_round % \
        self.discriminator_steps_per_call:
      fields.fail(o, 'discriminator_steps_per_round',
            'a multiple of discriminator_steps_per_call='
            f'{self.discriminator_steps_per_call}',
            self.discriminator_steps_per_round)
