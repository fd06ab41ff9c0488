"""MPO learner configuration: frozen, validated dataclasses.

Every field is checked when the dataclass is built, so a bad value fails with a
message naming the field and its accepted range before any process starts.
The defaults follow the ranges Acme uses for MPO on continuous control.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from tandem.agents.core import fields
from tandem.agents.core.fields import ConfigError

DUAL_OPTIMIZERS = ('adam', 'adamw', 'sgd', 'rmsprop', 'adagrad', 'adabelief')
NETWORK_OPTIMIZERS = ('adam', 'adamw', 'sgd', 'rmsprop')
SCHEDULES = ('constant', 'linear', 'cosine')
TEMPERATURE_FOR_WEIGHTS = ('before_update', 'after_update')
SOLVERS = ('gradient', 'exact')
TARGET_UPDATES = ('periodic', 'polyak')
ESTEP_STATES = ('current', 'current_and_next', 'next')
INIT_SCHEMES = ('tandem', 'acme')  # agents/mpo/networks.py: SCHEMES
POLICY_MEANS = ('linear', 'tanh')  # MPOConfig.policy_mean
GRAD_CLIP_MODES = ('per_network', 'joint')
ACTING_POLICIES = ('online', 'target')
CRITIC_TYPES = ('scalar', 'mog')  # agents/mpo/networks.py: CRITIC_HEADS

# Upper bounds on the network optimizers' learning rates and on
# max_grad_norm. The learner's non-finite guard tests what a batch brings in
# (losses, gradients, new duals), not the network state the optimizers write
# (agents/mpo/learner.py, step 6). From a state they wrote themselves, one
# step of the network optimizers (NETWORK_OPTIMIZERS) moves an SGD parameter
# by at most learning_rate · max_grad_norm and an adam, adamw or rmsprop
# parameter by a small multiple of learning_rate (at most about 7×): at these
# bounds at most 1e15, far below float32's largest value (3.4e38). Rates in
# use are 1 or less and clip bounds in the tens. The dual and discriminator
# rates are not bounded here: the duals are clamped to a reference range
# (duals.py) and the discriminator's guard tests the parameters it writes.
MAX_LEARNING_RATE = 1e3
MAX_GRAD_NORM = 1e12
_BOUND_REASON = ('bounded so that an accepted step cannot write a '
                 'non-finite state')


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """An optax optimizer by name, with its learning-rate schedule.

  The schedule runs over its group's schedule_horizon global steps from
  learning_rate to final_fraction·learning_rate (agents/core/schedules.py),
  holding learning_rate for the first hold_fraction of the horizon.
  """
  name: str = 'adam'
  learning_rate: float = 1e-4
  schedule: str = 'constant'
  final_fraction: float = 1.0
  hold_fraction: float = 0.0
  owner: str = dataclasses.field(default='OptimizerConfig', compare=False,
                                 repr=False)
  choices: Sequence[str] = dataclasses.field(default=NETWORK_OPTIMIZERS,
                                             compare=False, repr=False)

  def __post_init__(self):
    fields.one_of(self.owner, 'name', self.name, self.choices)
    fields.positive(self.owner, 'learning_rate', self.learning_rate)
    fields.one_of(self.owner, 'schedule', self.schedule, SCHEDULES)
    fields.unit_interval(self.owner, 'final_fraction', self.final_fraction,
                   open_low=False)
    # 1 would hold the rate for the whole horizon and divide by zero.
    fields.unit_interval(self.owner, 'hold_fraction', self.hold_fraction,
                         open_low=False, open_high=True)


def optimizer_field(owner, field, value, choices):
  # The name is re-checked here: an OptimizerConfig built for one group may
  # be placed in another with a narrower set of optimizers.
  if not isinstance(value, OptimizerConfig):
    fields.fail(owner, field, 'an OptimizerConfig', value)
  if value.name not in choices:
    fields.fail(owner, field + '.name', f'one of {list(choices)}', value.name)


def dual_optimizer(name: str = 'adam', learning_rate: float = 1e-2,
                   group: str = 'temperature', **kw) -> OptimizerConfig:
  return OptimizerConfig(name, learning_rate, owner=f'DualConfig.{group}_optimizer',
                         choices=DUAL_OPTIMIZERS, **kw)


@dataclasses.dataclass(frozen=True)
class DualConfig:
  """How the MPO duals (η, η_penalty, α_mean, α_stddev) are optimised.

  num_steps: dual updates per SGD step, looped inside the compiled update on
    statistics computed once per batch.
  temperature_optimizer / alpha_optimizer: one optax optimizer per group.
  temperature_for_weights: weight the E-step with η before or after this
    step's dual updates.
  solver: 'gradient' (num_steps optimizer steps on η) or 'exact' (solve the
    1-D convex temperature dual to `exact_tolerance` in log η, in-graph).
    The penalty temperature follows the same solver.
  """
  num_steps: int = 1
  temperature_optimizer: OptimizerConfig = dataclasses.field(
      default_factory=lambda: dual_optimizer(group='temperature'))
  alpha_optimizer: OptimizerConfig = dataclasses.field(
      default_factory=lambda: dual_optimizer(group='alpha'))
  temperature_for_weights: str = 'before_update'
  solver: str = 'gradient'
  exact_tolerance: float = 1e-6
  exact_max_iterations: int = 100
  init_temperature: float = 10.0
  # η_penalty's start; 0 means init_temperature's value (Acme starts both
  # temperatures from one value). Separate so that a study can move η's
  # start alone (studies/dual_study.py's adam1_cold).
  init_penalty_temperature: float = 0.0
  init_alpha_mean: float = 10.0
  init_alpha_stddev: float = 1000.0
  floor: float = 1e-8
  log_residual: bool = True

  def __post_init__(self):
    o = 'DualConfig'
    fields.int_at_least(o, 'num_steps', self.num_steps, 1)
    for f in ('temperature_optimizer', 'alpha_optimizer'):
      optimizer_field(o, f, getattr(self, f), DUAL_OPTIMIZERS)
    fields.one_of(o, 'temperature_for_weights', self.temperature_for_weights,
            TEMPERATURE_FOR_WEIGHTS)
    fields.one_of(o, 'solver', self.solver, SOLVERS)
    fields.positive(o, 'exact_tolerance', self.exact_tolerance)
    fields.step_count(o, 'exact_max_iterations', self.exact_max_iterations)
    for f in ('init_temperature', 'init_alpha_mean', 'init_alpha_stddev',
              'floor'):
      fields.positive(o, f, getattr(self, f))
    for f in ('init_temperature', 'init_alpha_mean', 'init_alpha_stddev'):
      if getattr(self, f) <= self.floor:
        fields.fail(o, f, f'a value above DualConfig.floor={self.floor}',
              getattr(self, f))
    # 0 stands for init_temperature's start; any other start must clear the
    # floor as init_temperature's does.
    fields.non_negative(o, 'init_penalty_temperature', self.init_penalty_temperature)
    if 0 < self.init_penalty_temperature <= self.floor:
      fields.fail(o, 'init_penalty_temperature', '0 (init_temperature\'s start) or '
            f'a value above DualConfig.floor={self.floor}',
            self.init_penalty_temperature)

  @property
  def penalty_temperature_start(self) -> float:
    return self.init_penalty_temperature or self.init_temperature


@dataclasses.dataclass(frozen=True)
class MPOConfig:
  """Hyperparameters of the MPO learner (Abdolmaleki et al. 2018a, b)."""
  # Networks.
  policy_layers: tuple = (256, 256, 256)
  critic_layers: tuple = (256, 256, 256)
  # The policy's initial stddev (and the softplus scale after it). Acme's
  # make_control_networks defaults to 0.7 (acme/agents/jax/mpo/networks.py:
  # 193) but its MPO baseline passes 0.5 (examples/baselines/rl_continuous/
  # run_mpo.py:57), as here. It stays its own field, outside `init`, because
  # actors read it to act and would disagree with a scheme-dependent value.
  # It is the actors' noise for a whole 100k-step run (α_stddev starts at
  # 1000): 0.3 delays the swing-up, and 0.7 advances it on most seeds but
  # misses it on more (BENCHMARKS.md, Dual strategies).
  policy_init_scale: float = 0.5
  policy_min_scale: float = 1e-6
  # The policy mean's output: 'linear' (unbounded, as Acme's MPO networks and
  # the default) or 'tanh' (mean = tanh(pre-activation), inside (-1, 1) by
  # construction; the Gaussian around it is not squashed, so samples still
  # leave the box and actors still clip). The critic is flat outside the box
  # (networks.apply_critic clips its action input), so nothing but the action
  # penalty stops an unbounded mean from drifting out; in AIRL, a mean beyond
  # the box makes the expert's interior actions far less likely under π than
  # the agent's own edge actions, and the logit f - log π separates them with
  # no help from f. For AIRL on cartpole 'tanh' keeps the mean in the box
  # yet learns slower than the action penalty alone, so no named config uses
  # it (BENCHMARKS.md, Adversarial imitation).
  policy_mean: str = 'linear'
  # Initial weights (networks.SCHEMES):
  #   tandem: lecun-normal torso, heads at 1e-4 (policy) and 1e-2 (critic)
  #           times lecun-normal: the default, as it ends higher than
  #           'acme' on cartpole:swingup (BENCHMARKS.md, Dual strategies).
  #   acme:   Acme JAX MPO's: UniformScaling(0.333) torso, policy head
  #           VarianceScaling(1e-4) (stddev 0.01/sqrt(fan_in), 100x tandem's),
  #           critic head TruncatedNormal(0.01) whatever the fan-in (about
  #           14x tandem's at 256 units).
  init: str = 'tandem'
  # The critic's output:
  #   scalar: Q(s, a), fitted to the n-step TD target by squared error (the
  #           default; Acme's published control-suite MPO baseline,
  #           examples/baselines/rl_continuous/run_mpo.py, uses this kind).
  #   mog:    a mixture of mog_num_components Gaussians over the return
  #           (Acme's MPOConfig default, CriticType.MIXTURE_OF_GAUSSIANS;
  #           Shahriari et al. 2022), fitted by the sample-based cross-entropy
  #           to r + γⁿ z, z drawn mog_num_value_samples times from the
  #           target critic's mixture at each bootstrap action sample; the
  #           E-step and everything else use the mixture's mean as Q.
  #           Components start with stddev mog_init_scale (Acme's 1e-3).
  critic_type: str = 'scalar'
  mog_num_components: int = 5
  mog_init_scale: float = 1e-3
  mog_num_value_samples: int = 128
  # Losses.
  # KL bounds: ε for the E-step (temperature), ε_mean and ε_stddev for the
  # M-step (alphas). Per-dimension convention: with per_dim_constraining,
  # epsilon_mean and epsilon_stddev are the budgets of the whole action and
  # the learner divides them by the action dimension D, bounding each
  # dimension's KL by ε/D (learner.kl_bounds). This is the rule of thumb of
  # Acme's MPO README ("divide it by the number of dimensions in the action
  # space"); Acme's code itself applies epsilon_mean to every dimension
  # undivided, so Acme's 0.0025 equals Tandem's 0.0025·D. The bounds used
  # are logged as epsilon_used, epsilon_mean_used, epsilon_stddev_used and
  # epsilon_penalty_used. ε and ε_penalty are never divided. The named MPO
  # configs (configs/mpo.py) set epsilon_mean 0.01, as Acme's published
  # control-suite baseline does; their docstring says why.
  epsilon: float = 0.1
  epsilon_mean: float = 0.0025
  epsilon_stddev: float = 1e-6
  epsilon_penalty: float = 0.001
  per_dim_constraining: bool = True
  action_penalization: bool = True
  num_samples: int = 20
  # Where the policy is improved (the E-step's states):
  #   current:          at s, with its own N samples (the bootstrap draws
  #                     another N at s'): 2 target-critic evaluations of N·B.
  #   current_and_next: at s and s', reusing the bootstrap's samples and
  #                     Q-values at s' (Acme's JAX MPO): same critic work,
  #                     twice the states.
  #   next:             at s' only, one sample set serving the bootstrap and
  #                     the E-step (Acme's TF MPO): half the critic work.
  estep_states: str = 'current'
  # The policy params the learner serves to actors and the evaluator:
  #   online: the params the last SGD step wrote (also what a config.json
  #           without this field means).
  #   target: the target policy, which the E-step samples from and the KL
  #           bounds are measured against, as Acme's JAX MPO serves
  #           (acme/agents/jax/mpo/learning.py get_variables) and its TF MPO
  #           exposes: the behaviour then moves only when the target does.
  acting_policy: str = 'online'
  discount: float = 0.99
  n_step: int = 5
  # Optimisation.
  batch_size: int = 256
  policy_optimizer: OptimizerConfig = dataclasses.field(
      default_factory=lambda: OptimizerConfig(owner='MPOConfig.policy_optimizer'))
  critic_optimizer: OptimizerConfig = dataclasses.field(
      default_factory=lambda: OptimizerConfig(owner='MPOConfig.critic_optimizer'))
  max_grad_norm: float = 40.0
  # How max_grad_norm applies:
  #   per_network: the policy's and the critic's gradients are each clipped
  #                to global norm max_grad_norm by their own optimizer (the
  #                default).
  #   joint:       one global norm over both gradients together; both are
  #                scaled by the same min(1, max_grad_norm / ‖(g_π, g_Q)‖),
  #                so a large critic gradient also shrinks the policy's step.
  #                This is Acme's MPOLearner default: one optimizer over all
  #                network params, optax.chain(clip_by_global_norm(40), adam)
  #                (acme/agents/jax/mpo/learning.py:209-215, 742-748). Acme's
  #                MPOBuilder passes its own unclipped adamw instead
  #                (builder.py:143-147, 188-189), so its launched agents do not
  #                clip network gradients at all. Duals are never clipped
  #                here (Acme's MPOLearner default clips them, jointly, to
  #                the same bound; its builder does not).
  #                With critic_type='mog' a joint clip all but stops the
  #                policy early on: components start with stddev
  #                mog_init_scale, so the critic's first cross-entropy
  #                gradients are huge (norm ~1e6 at step 1, ~7e4 at step
  #                100, ~90 at step 1000 on random cartpole-shaped batches),
  #                and the policy's step shrinks by the same factor.
  grad_clip_mode: str = 'per_network'
  duals: DualConfig = dataclasses.field(default_factory=DualConfig)
  target_update: str = 'periodic'
  target_update_period: int = 100
  target_polyak_tau: float = 0.005
  sgd_steps_per_call: int = 1
  # Learner steps over which schedules run from start to end value; 0: the
  # steps the run's budget pays for, which the launch sets when it creates
  # the run (a learner needs the count).
  schedule_horizon: int = 1_000_000

  @property
  def policy_head_kwargs(self) -> dict:
    """The policy head's keyword arguments, as networks.apply_policy and
    numpy_policy.apply_policy take them: learner and actors read them here,
    so the two cannot disagree on the head they apply."""
    return dict(init_scale=self.policy_init_scale,
                min_scale=self.policy_min_scale,
                tanh_mean=self.policy_mean == 'tanh')

  def __post_init__(self):
    o = 'MPOConfig'
    for f in ('policy_layers', 'critic_layers'):
      object.__setattr__(self, f, fields.layers(o, f, getattr(self, f)))
    for f in ('policy_init_scale', 'policy_min_scale', 'epsilon',
              'epsilon_mean', 'epsilon_stddev', 'epsilon_penalty'):
      fields.positive(o, f, getattr(self, f))
    fields.positive_at_most(o, 'max_grad_norm', self.max_grad_norm,
                            MAX_GRAD_NORM, _BOUND_REASON)
    fields.int_at_least(o, 'num_samples', self.num_samples, 2)
    fields.one_of(o, 'estep_states', self.estep_states, ESTEP_STATES)
    fields.one_of(o, 'acting_policy', self.acting_policy, ACTING_POLICIES)
    fields.one_of(o, 'init', self.init, INIT_SCHEMES)
    fields.one_of(o, 'policy_mean', self.policy_mean, POLICY_MEANS)
    fields.one_of(o, 'grad_clip_mode', self.grad_clip_mode, GRAD_CLIP_MODES)
    fields.one_of(o, 'critic_type', self.critic_type, CRITIC_TYPES)
    fields.int_at_least(o, 'mog_num_components', self.mog_num_components, 1)
    fields.positive(o, 'mog_init_scale', self.mog_init_scale)
    fields.int_at_least(o, 'mog_num_value_samples', self.mog_num_value_samples, 1)
    # The action penalty's temperature solves the same dual over the same
    # samples, so its bound is the same.
    for f in ('epsilon', 'epsilon_penalty')[
        :2 if self.action_penalization else 1]:
      if getattr(self, f) >= math.log(self.num_samples):
        fields.fail(o, f, f'a value < log(num_samples) = '
              f'{math.log(self.num_samples):.3f} (the largest KL a '
              'reweighting of num_samples actions can reach)',
              getattr(self, f))
    if not (isinstance(self.discount, (int, float)) and 0 <= self.discount <= 1):
      fields.fail(o, 'discount', 'a number in [0, 1]', self.discount)
    fields.int_at_least(o, 'n_step', self.n_step, 1)
    fields.int_at_least(o, 'batch_size', self.batch_size, 1)
    for f in ('policy_optimizer', 'critic_optimizer'):
      optimizer_field(o, f, getattr(self, f), NETWORK_OPTIMIZERS)
      fields.positive_at_most(o, f + '.learning_rate',
                              getattr(self, f).learning_rate,
                              MAX_LEARNING_RATE, _BOUND_REASON)
    if not isinstance(self.duals, DualConfig):
      fields.fail(o, 'duals', 'a DualConfig', self.duals)
    fields.one_of(o, 'target_update', self.target_update, TARGET_UPDATES)
    fields.step_count(o, 'target_update_period', self.target_update_period)
    fields.unit_interval(o, 'target_polyak_tau', self.target_polyak_tau)
    fields.int_at_least(o, 'sgd_steps_per_call', self.sgd_steps_per_call, 1)
    fields.schedule_horizon(o, self.schedule_horizon)


def replace(config, overrides: Mapping[str, Any]):
  """Returns `config` with dotted-path overrides, re-validated.

  `replace(cfg, {'duals.num_steps': 10, 'duals.temperature_optimizer.name':
  'sgd'})`. An unknown path raises ConfigError naming it and the valid fields.
  """
  nested: dict = {}
  for path, value in overrides.items():
    head, _, rest = path.partition('.')
    names = [f.name for f in dataclasses.fields(config) if f.init]
    if head not in names:
      raise ConfigError(
          f'{type(config).__name__}: unknown field {head!r} (in override '
          f'{path!r}); fields are {names}')
    if rest:
      nested.setdefault(head, {})[rest] = value
    else:
      nested[head] = value
  changes = {}
  for head, value in nested.items():
    if isinstance(value, dict):
      changes[head] = replace(getattr(config, head), value)
    else:
      changes[head] = value
  return dataclasses.replace(config, **changes)
