"""What a resume may change of a run's config, and the config a --resume
launches: the run's stored config.json with the command line's overrides."""

from __future__ import annotations

import dataclasses
from typing import Any

from tandem.agents.core.fields import ConfigError
from tandem.agents.mpo import config as mpo_config
from tandem.launch import config as config_lib
from tandem.launch.cloud.config import CloudConfig


# Fields a resume may change: how long, how many actors, how often things
# happen, replay sizing (only with --drop_replay while a replay checkpoint
# exists: a restored buffer keeps its settings; launch/replay_checks.py).
# Anything else (the environment, seed, networks, losses, optimizers and their
# schedules and horizons, n-step, the round structure, the discriminator)
# would make the resumed run a different run, so `--resume` refuses it
# (check_resume_overrides).
RESUMABLE_FIELDS = frozenset({
    'env_step_budget', 'num_actors', 'envs_per_actor', 'actor_update_period',
    'counter_sync_period', 'eval_period_env_steps', 'eval_episodes',
    'final_eval_episodes', 'eval_sampled', 'checkpoint_period_s',
    'checkpoints_to_keep', 'learner_log_every', 'tensorboard', 'stop_grace_s',
    'replay_max_size', 'replay_min_size', 'samples_per_insert',
    'replay_error_buffer',
    'fault_injection_actor_crash_after', 'max_consecutive_env_faults',
    'stall_window', 'max_skipped_fraction', 'fault_injection_nonfinite_after',
    'fault_injection_slow_stop_s', 'fault_injection_env_fault_every',
    'replay_checkpoints', 'replay_checkpoint_period_s',
    # The path may move; its contents are held to the run's first file by
    # sha256 (launch/demos.py: check_demonstrations).
    'demos'}) | frozenset(
        # Where the run runs, not what it computes.
        f'cloud.{f.name}' for f in dataclasses.fields(CloudConfig))

# Set by a resume itself, never by a flag: the folder the run's directory is
# in now (a run copied or moved elsewhere resumes where it is, and its
# config.json and history say so).
SET_BY_RESUME = frozenset({'runs_root'})


def check_resume_overrides(old: 'config_lib.TrainConfig | dict',
                           new: 'config_lib.TrainConfig | dict') -> dict:
  """The fields `new` changes from `old` (each a config or its
  leaf_fields/stored_fields), {path: (old, new)}; raises ConfigError naming
  every changed field a resume may not change."""
  before = old if isinstance(old, dict) else config_lib.leaf_fields(old)
  after = new if isinstance(new, dict) else config_lib.leaf_fields(new)
  changed = {p: (before.get(p), after[p]) for p in after
             if before.get(p) != after[p]}
  refused = sorted(p for p in changed
                   if p not in RESUMABLE_FIELDS | SET_BY_RESUME)
  if refused:
    raise ConfigError(
        f'--resume cannot change {refused}: they define the run (a changed '
        'value would make the checkpoint, schedules and logs describe '
        'another run); start a new run with --name instead. A resume may '
        f'change: {sorted(RESUMABLE_FIELDS)}')
  return changed


class StoredConfigError(ConfigError):
  """A run's stored config.json fails a check of this version (a field it
  does not know, or a value a check added since refuses)."""


def resume_config(data: dict, overrides: dict[str, Any]
                  ) -> tuple['config_lib.TrainConfig', dict]:
  """The config a --resume launches, from the run's stored config.json
  (`data`) and the command line's `overrides`, validated once as a whole,
  and the fields it changes, {path: (old, new)}. The stored values are not
  validated on their own: a run written before a check was added resumes
  once an override mends what the check refuses. Raises ConfigError naming
  an unknown field, a field a resume may not change (before the values are
  validated together), or a value the merged config refuses; a
  StoredConfigError when the stored config is at fault."""
  try:
    before = config_lib.stored_fields(data)
  except ConfigError as e:
    raise StoredConfigError(str(e)) from e
  defaults = config_lib.leaf_fields(config_lib.config_class(data)())
  after = dict(before)
  for path, value in overrides.items():
    config_lib.check_known(path, defaults)
    after[path] = config_lib.parse_value(path, value, defaults[path])
  changed = check_resume_overrides(before, after)
  try:
    return config_lib.from_dict(data, overrides), changed
  except ConfigError as e:
    try:
      config_lib.from_dict(data)
    except ConfigError as alone:
      if str(alone) == str(e):  # the overrides left the fault as it was
        raise StoredConfigError(str(e)) from e
      raise ConfigError(f'{e} (and config.json alone fails: {alone})') from e
    raise  # the overrides are at fault


def plumbing_stand_ins(data: dict) -> dict:
  """For a command that reads a run without running it: a value for every
  field a resume may change, passing the checks those fields share with
  the stored config's defining parts (replay_min_size >= each batch size,
  a budget that pays for the first update). The defaults, where those
  parts fail on their own (from_dict then names them)."""
  cls = config_lib.config_class(data)
  base = cls()
  defaults = config_lib.leaf_fields(base)
  out = {f: defaults[f] for f in RESUMABLE_FIELDS if f in defaults}
  groups = ('mpo', 'ail') if cls is config_lib.AILTrainConfig else ('mpo',)
  try:
    stored = config_lib.stored_fields(data)
    parts = {g: mpo_config.replace(getattr(base, g), {
        p[len(g) + 1:]: v for p, v in stored.items()
        if p.startswith(g + '.')}) for g in groups}
  except ConfigError:
    return out
  mpo, ail = parts['mpo'], parts.get('ail')
  out['replay_min_size'] = max(out['replay_min_size'], mpo.batch_size,
                               ail.batch_size if ail else 0)
  out['replay_max_size'] = max(out['replay_max_size'], out['replay_min_size'])
  out['env_step_budget'] = max(
      out['env_step_budget'],
      out['replay_min_size'] + config_lib.first_update_rows(mpo, ail) + 1)
  return out
