"""The training program's config: what to train, where, and for how long.

`TrainConfig` wraps the learner's `MPOConfig` with the program's settings
(environment, actors, replay, budgets, periods). Like MPOConfig it is frozen
and validated at construction; `to_dict`/`from_dict` round-trip it through
JSON (the run directory's config.json), and `leaf_fields` lists every field
as a dotted path for the command line.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

from tandem.agents.ail.config import AILConfig
from tandem.agents.mpo import config as mpo_config
from tandem.agents.core.fields import ConfigError
from tandem.agents.mpo.config import MPOConfig
from tandem.launch.cloud.config import CloudConfig

# vertex_ai: a Vertex AI CustomJob; vertex_local: the same job's replicas as
# process groups on this machine (launch/cloud/).
LAUNCH_TYPES = ('local_mp', 'local_mt', 'vertex_ai', 'vertex_local')
VERTEX = ('vertex_ai', 'vertex_local')


def _check(cond, field, expected, got):
  if not cond:
    raise ConfigError(f'TrainConfig.{field}: expected {expected}, got {got!r}')


def _is_int(v):
  return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
  return isinstance(v, (int, float)) and not isinstance(v, bool) and \
      math.isfinite(v)


def first_update_rows(mpo: MPOConfig, ail: AILConfig | None = None) -> int:
  """The replay rows the learner samples up to and including its first
  policy update: one call of sgd_steps_per_call batches, after (adversarial
  runs) a round's discriminator steps, which sample first."""
  rows = mpo.sgd_steps_per_call * mpo.batch_size
  if ail is not None:
    rows += ail.discriminator_steps_per_round * ail.batch_size
  return rows


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """A distributed MPO run (launch/mpo.py draws the program)."""
  name: str = 'cartpole_swingup'
  env: str = 'cartpole:swingup'
  seed: int = 0
  mpo: MPOConfig = dataclasses.field(default_factory=MPOConfig)
  num_actors: int = 2
  env_step_budget: int = 100_000
  # Replay (Reverb): uniform sampling, FIFO removal, SampleToInsertRatio.
  replay_max_size: int = 1_000_000
  replay_min_size: int = 1_000
  samples_per_insert: float = 128.0
  replay_error_buffer: float = 1_000.0
  # The buffer is checkpointed into the run directory every this many
  # seconds and at every stop, and restored on --resume (no refill).
  replay_checkpoints: bool = True
  replay_checkpoint_period_s: float = 600.0
  # Acting.
  envs_per_actor: int = 4             # environments each actor steps in turn
  actor_update_period: int = 100      # env steps between parameter refreshes
  counter_sync_period: int = 100      # env steps between counter increments
  # Evaluation.
  eval_period_env_steps: int = 10_000
  eval_episodes: int = 2
  final_eval_episodes: int = 5
  # Each evaluation also runs as many episodes with the policy's samples,
  # the actions the actors take, logged beside the mean action's as
  # eval_sampled_return (and _min, _max). With a wide policy the clipped
  # mean action is a policy the learner never runs, and the two returns
  # can differ by hundreds. Off: those columns are NaN.
  eval_sampled: bool = False
  # Checkpoints and logs.
  checkpoint_period_s: float = 120.0
  checkpoints_to_keep: int = 3
  # Learner steps between CSV rows (and discriminator steps between the
  # discriminator's). A row is ~480 bytes: at 1, a cartpole run
  # (samples_per_insert 48, batch 256) writes ~90 MB per million env steps;
  # at 10, ~9 MB. Set 1 to keep every step.
  learner_log_every: int = 10
  tensorboard: bool = True
  runs_root: str = 'runs'
  # Seconds Launchpad gives nodes to stop before it kills them
  # (--lp_termination_notice_secs, 10 by default): a learner compiling its
  # first update when the stop comes needs more than 10 s on 2 busy cores,
  # and a killed learner writes no checkpoint on the way down.
  stop_grace_s: float = 60.0
  # An actor or the evaluator survives an exception from its environment
  # (discards the episode, rebuilds the environment, counts env_faults);
  # one environment faulting more times than this in a row fails the node.
  max_consecutive_env_faults: int = 5
  # The learner stops the program (exit 1, naming its last finite step)
  # once more than this fraction of its last `stall_window` updates were
  # skipped as non-finite: a learner that only skips is not training.
  stall_window: int = 1_000
  max_skipped_fraction: float = 0.5
  # Test hook: actor 0 raises after this many env steps (0: never).
  fault_injection_actor_crash_after: int = 0
  # Test hook: every learner update from this learner step on is treated
  # as non-finite (0: never).
  fault_injection_nonfinite_after: int = 0
  # Test hook: actor 0's environments raise on every this-many-th step
  # (1: on every step, a permanently failing environment; 0: never).
  fault_injection_env_fault_every: int = 0
  # Test hook: the learner's stop path sleeps this long before its
  # checkpoint (0: never), to test a stop that outlasts stop_grace_s.
  fault_injection_slow_stop_s: float = 0.0
  # Where a --launch vertex_ai (or vertex_local) job runs: project, images,
  # machine types, the placement of node groups on worker pools.
  cloud: CloudConfig = dataclasses.field(default_factory=CloudConfig)

  def __post_init__(self):
    _check(isinstance(self.name, str) and self.name and
           all(c.isalnum() or c in '-_.' for c in self.name) and
           not self.name.startswith('.'), 'name',
           'a non-empty run name of letters, digits, - _ .', self.name)
    _check(isinstance(self.env, str) and ':' in self.env, 'env',
           "an environment name 'domain:task' or 'gym:<id>'", self.env)
    _check(_is_int(self.seed) and self.seed >= 0, 'seed', 'an integer >= 0',
           self.seed)
    _check(isinstance(self.mpo, MPOConfig), 'mpo', 'an MPOConfig', self.mpo)
    _check(isinstance(self.cloud, CloudConfig), 'cloud', 'a CloudConfig',
           self.cloud)
    for f in ('num_actors', 'envs_per_actor', 'env_step_budget',
              'replay_max_size',
              'replay_min_size', 'actor_update_period', 'counter_sync_period',
              'eval_period_env_steps', 'eval_episodes', 'final_eval_episodes',
              'checkpoints_to_keep', 'learner_log_every'):
      v = getattr(self, f)
      _check(_is_int(v) and v >= 1, f, 'an integer >= 1', v)
    _check(self.envs_per_actor <= 64, 'envs_per_actor',
           'at most 64 (each environment lives in the actor\'s memory)',
           self.envs_per_actor)
    _check(self.replay_min_size <= self.replay_max_size, 'replay_min_size',
           f'a value <= replay_max_size={self.replay_max_size}',
           self.replay_min_size)
    _check(self.replay_min_size >= self.mpo.batch_size, 'replay_min_size',
           f'a value >= mpo.batch_size={self.mpo.batch_size}',
           self.replay_min_size)
    # Below it the learner never samples, and the run would end with an
    # untrained policy's final evaluation and exit 0.
    _check(self.env_step_budget > self.replay_min_size, 'env_step_budget',
           f'a value > replay_min_size={self.replay_min_size} (the learner '
           'samples only once replay holds that many transitions)',
           self.env_step_budget)
    _check(_is_num(self.samples_per_insert) and self.samples_per_insert > 0,
           'samples_per_insert', 'a finite number > 0',
           self.samples_per_insert)
    # Reverb needs room for at least one insert and one sample in the buffer.
    low = 2.0 * max(1.0, float(self.samples_per_insert))
    _check(_is_num(self.replay_error_buffer) and
           self.replay_error_buffer >= low, 'replay_error_buffer',
           f'a number >= 2·max(1, samples_per_insert) = {low}',
           self.replay_error_buffer)
    # The rate limiter lets the whole run sample at most this many rows; a
    # learner call that needs more never completes, and the run would end
    # untrained with exit 0.
    allowed = ((self.env_step_budget - self.replay_min_size) *
               float(self.samples_per_insert) + self.replay_error_buffer)
    # An adversarial run's ail is read before its own checks: one of the
    # wrong type is named by them, not by an AttributeError here.
    ail = getattr(self, 'ail', None)
    need = first_update_rows(self.mpo,
                             ail if isinstance(ail, AILConfig) else None)
    _check(allowed >= need, 'env_step_budget',
           f'a budget whose inserts let the learner sample the {need} rows '
           'its first policy update needs ((budget - replay_min_size) · '
           f'samples_per_insert + replay_error_buffer = {allowed:.0f} rows)',
           self.env_step_budget)
    # Every actor must refresh its policy at least once before its share of
    # the budget is spent, or all its data comes from the initial policy.
    share = self.env_step_budget // self.num_actors
    _check(self.actor_update_period <= share, 'actor_update_period',
           f'at most env_step_budget // num_actors = {share} (an actor '
           'refreshes its parameters every that many of its env steps)',
           self.actor_update_period)
    _check(_is_num(self.checkpoint_period_s) and self.checkpoint_period_s > 0,
           'checkpoint_period_s', 'a number > 0', self.checkpoint_period_s)
    _check(isinstance(self.replay_checkpoints, bool), 'replay_checkpoints',
           'true or false', self.replay_checkpoints)
    _check(_is_num(self.replay_checkpoint_period_s) and
           self.replay_checkpoint_period_s > 0, 'replay_checkpoint_period_s',
           'a number of seconds > 0', self.replay_checkpoint_period_s)
    _check(_is_num(self.stop_grace_s) and self.stop_grace_s >= 1,
           'stop_grace_s', 'a number of seconds >= 1', self.stop_grace_s)
    _check(isinstance(self.eval_sampled, bool), 'eval_sampled',
           'true or false', self.eval_sampled)
    _check(isinstance(self.tensorboard, bool), 'tensorboard', 'true or false',
           self.tensorboard)
    _check(isinstance(self.runs_root, str) and self.runs_root, 'runs_root',
           'a directory path', self.runs_root)
    _check(_is_int(self.max_consecutive_env_faults) and
           self.max_consecutive_env_faults >= 0,
           'max_consecutive_env_faults',
           'an integer >= 0 (0: the first environment exception fails the '
           'node)', self.max_consecutive_env_faults)
    _check(_is_int(self.stall_window) and self.stall_window >= 1,
           'stall_window', 'an integer >= 1 (learner updates)',
           self.stall_window)
    _check(_is_num(self.max_skipped_fraction) and
           0 <= self.max_skipped_fraction < 1, 'max_skipped_fraction',
           'a number in [0, 1)', self.max_skipped_fraction)
    _check(_is_int(self.fault_injection_nonfinite_after) and
           self.fault_injection_nonfinite_after >= 0,
           'fault_injection_nonfinite_after', 'an integer >= 0',
           self.fault_injection_nonfinite_after)
    _check(_is_int(self.fault_injection_env_fault_every) and
           self.fault_injection_env_fault_every >= 0,
           'fault_injection_env_fault_every', 'an integer >= 0',
           self.fault_injection_env_fault_every)
    _check(_is_num(self.fault_injection_slow_stop_s) and
           self.fault_injection_slow_stop_s >= 0,
           'fault_injection_slow_stop_s', 'a number of seconds >= 0',
           self.fault_injection_slow_stop_s)
    _check(_is_int(self.fault_injection_actor_crash_after) and
           self.fault_injection_actor_crash_after >= 0,
           'fault_injection_actor_crash_after', 'an integer >= 0',
           self.fault_injection_actor_crash_after)


@dataclasses.dataclass(frozen=True)
class AILTrainConfig(TrainConfig):
  """An adversarial imitation run (launch/ail.py): the MPO program's
  settings, the discriminator's (`ail`) and the demonstrations file.

  `mpo.schedule_horizon` counts generator (MPO) steps and
  `ail.schedule_horizon` discriminator steps; both are stored in the
  learner's checkpointed state, so every schedule is a function of global
  counts and a horizon fixed once for the run.
  """
  name: str = 'ail'
  ail: AILConfig = dataclasses.field(default_factory=AILConfig)
  demos: str = ''

  def __post_init__(self):
    super().__post_init__()
    _check(isinstance(self.ail, AILConfig), 'ail', 'an AILConfig', self.ail)
    _check(isinstance(self.demos, str), 'demos',
           'the path of a demonstrations file (.npz)', self.demos)
    _check(self.replay_min_size >= self.ail.batch_size, 'replay_min_size',
           f'a value >= ail.batch_size={self.ail.batch_size}',
           self.replay_min_size)
    # The window is a part of the replay: a larger one would keep rows the
    # agent table has dropped, older than any the generator sees.
    _check(self.ail.discriminator_window <= self.replay_max_size,
           'ail.discriminator_window',
           f'at most replay_max_size={self.replay_max_size} (0: the whole '
           'replay)', self.ail.discriminator_window)
    self._resolve_absorbing_states()
    k = self.mpo.sgd_steps_per_call
    # A call never straddles a phase boundary (see AILConfig).
    _check(self.ail.generator_steps_per_round % k == 0,
           'ail.generator_steps_per_round',
           f'a multiple of mpo.sgd_steps_per_call={k}',
           self.ail.generator_steps_per_round)

  def _resolve_absorbing_states(self):
    """The ail block learns whether this env may end in a terminal state
    (environments.may_terminate), which ail.absorbing_states 'auto' follows;
    on every construction, so an overridden env counts. A malformed env is
    left to its own check (launch/resolve.py)."""
    from tandem.agents.envs import environments
    may = (isinstance(self.env, str) and ':' in self.env and
           environments.may_terminate(self.env))
    if self.ail.task_may_terminate != may:
      object.__setattr__(self, 'ail', dataclasses.replace(
          self.ail, task_may_terminate=may))
    # The absorbing state's value is r_abs / (1 - γ).
    _check(not self.ail.absorbing or self.mpo.discount < 1,
           'ail.absorbing_states',
           f"'off' with mpo.discount={self.mpo.discount} (the absorbing "
           "state's value r / (1 - discount) needs a discount < 1)",
           self.ail.absorbing_states)


# --------------------------------------------------------------------------
# Dotted paths, overrides, JSON.

# Bookkeeping, not settings: OptimizerConfig's owner and choices, and what
# AILTrainConfig derives from its env.
_HIDDEN = ('owner', 'choices', 'task_may_terminate')


def _fields(obj):
  return [f for f in dataclasses.fields(obj) if f.init and f.name not in
          _HIDDEN]


def leaf_fields(obj, prefix: str = '') -> dict[str, Any]:
  """{'mpo.duals.num_steps': 1, ...}: every settable field and its value."""
  out = {}
  for f in _fields(obj):
    v = getattr(obj, f.name)
    if dataclasses.is_dataclass(v):
      out.update(leaf_fields(v, prefix + f.name + '.'))
    else:
      out[prefix + f.name] = v
  return out


def to_dict(obj) -> dict:
  out = {}
  for f in _fields(obj):
    v = getattr(obj, f.name)
    out[f.name] = to_dict(v) if dataclasses.is_dataclass(v) else (
        list(v) if isinstance(v, tuple) else v)
  return out


def config_class(data: dict):
  """The config class a to_dict() result came from."""
  return AILTrainConfig if 'ail' in data else TrainConfig


def _flatten(data: dict) -> dict:
  if not isinstance(data, dict):
    raise ConfigError(f'a config must be a JSON object of fields, got '
                      f'{type(data).__name__}')
  flat = {}

  def walk(d, prefix):
    for k, v in d.items():
      if isinstance(v, dict):
        walk(v, prefix + k + '.')
      else:
        flat[prefix + k] = v
  walk(data, '')
  return flat


def _as_run(data: dict) -> dict:
  """A stored config with the fields added since it was written set to
  what its run did: an adversarial run stored without ail.absorbing_states
  ran without them (the default, 'auto', would turn them on for a task that
  may terminate, and its checkpoint would no longer fit)."""
  ail = data.get('ail') if isinstance(data, dict) else None
  if isinstance(ail, dict) and 'absorbing_states' not in ail:
    return {**data, 'ail': {**ail, 'absorbing_states': 'off'}}
  return data


def stored_fields(data: dict) -> dict[str, Any]:
  """A to_dict() result as leaf_fields() would list it, without validating
  the values together: a run's config.json written before a check was
  added still reads, so a resume can name what it changes."""
  data = _as_run(data)
  flat = _flatten(data)
  defaults = leaf_fields(config_class(data)())
  out = dict(defaults)
  for path, value in flat.items():
    check_known(path, defaults)
    out[path] = parse_value(path, value, defaults[path])
  return out


def from_dict(data: dict, overrides: dict[str, Any] | None = None
              ) -> TrainConfig:
  """Inverse of to_dict, re-validating every field. `overrides` (dotted
  paths) replace stored values before the one validation, so an override
  can mend a stored config that a later version's checks refuse."""
  data = _as_run(data)
  flat = _flatten(data)
  flat.update(overrides or {})
  return apply_overrides(config_class(data)(), flat)


def check_known(path: str, known: dict) -> None:
  if path not in known:
    close = [k for k in known if k.split('.')[-1] == path.split('.')[-1]]
    hint = f'; did you mean {close}?' if close else ''
    raise ConfigError(f'unknown config field {path!r}{hint}')


def apply_overrides(cfg: TrainConfig, overrides: dict[str, Any]) -> TrainConfig:
  """Dotted-path overrides; values are converted to the field's type."""
  known = leaf_fields(cfg)
  typed = {}
  for path, value in overrides.items():
    check_known(path, known)
    typed[path] = parse_value(path, value, known[path])
  return mpo_config.replace(cfg, typed)


def parse_value(path: str, value: Any, default: Any) -> Any:
  """Converts a command-line string (or JSON value) to the default's type."""
  if not isinstance(value, str) or isinstance(default, str):
    if isinstance(default, tuple) and isinstance(value, list):
      return tuple(value)
    return value
  try:
    if isinstance(default, bool):
      if value.lower() in ('1', 'true', 'yes', 'on'):
        return True
      if value.lower() in ('0', 'false', 'no', 'off'):
        return False
      raise ValueError(value)
    if isinstance(default, int):
      return int(value)
    if isinstance(default, float):
      return float(value)
    if isinstance(default, tuple):
      return tuple(int(x) for x in value.replace(',', ' ').split())
  except ValueError:
    raise ConfigError(f'{path}: cannot read {value!r} as '
                      f'{type(default).__name__}') from None
  return value


def describe(cfg: TrainConfig) -> str:
  """One line per field, for --help."""
  lines = []
  for path, v in leaf_fields(cfg).items():
    shown = ','.join(map(str, v)) if isinstance(v, tuple) else v
    lines.append(f'  --{path}={shown}')
  return '\n'.join(lines)


del typing
