"""From the command line to a validated run config: a named config with
overrides, or a run's stored config.json with the changes a resume allows."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import traceback
from typing import Sequence

from tandem.agents.core.fields import ConfigError
from tandem.launch import config as config_lib
from tandem.launch import horizons
from tandem.launch import programs
from tandem.launch import replay_checks
from tandem.launch import resuming
from tandem.launch.cloud import config as cloud_config
from tandem.launch.errors import UsageError


# What a config of each command's program is called in a refusal.
_KINDS = {'train': 'an MPO config', 'train-ail': 'an adversarial imitation config'}


def check_kind(config_class: type, command: str, where: str) -> None:
  """Refuses a config of another program than the one `command` trains."""
  wanted = programs.command_of(config_class)
  if wanted != command:
    raise UsageError(f'{where}: {_KINDS[wanted]}; train it with tandem '
                     f'{wanted}')


@contextlib.contextmanager
def _config_code(spec: str, path: str, what: str):
  """Runs a config file's own code: a ConfigError or UsageError passes (a
  field its config refused); anything else it raises becomes a UsageError
  naming the file, the line in it and the error, not a traceback."""
  try:
    yield
  except (UsageError, ConfigError):
    raise
  except Exception as e:  # noqa: BLE001  (a user's code can raise anything)
    line = getattr(e, 'lineno', None) if isinstance(e, SyntaxError) else None
    if line is None:
      frames = [f for f in traceback.extract_tb(e.__traceback__)
                if os.path.abspath(f.filename) == os.path.abspath(path)]
      line = frames[-1].lineno if frames else None
    where = f'{path}, line {line}' if line else path
    raise UsageError(f'--config {spec!r}: {what} failed at {where}: '
                     f'{type(e).__name__}: {e}') from e


def load_named_config(spec: str) -> config_lib.TrainConfig:
  """'configs/mpo.py:cartpole' -> the TrainConfig that function returns."""
  path, sep, name = spec.partition(':')
  if not sep or not name:
    raise UsageError(f"--config {spec!r}: expected '<file.py>:<name>', e.g. "
                     "configs/mpo.py:cartpole")
  if not os.path.isfile(path):
    raise UsageError(f'--config {spec!r}: no such file {path}')
  module_spec = importlib.util.spec_from_file_location('tandem_user_config',
                                                       path)
  module = importlib.util.module_from_spec(module_spec)
  with _config_code(spec, path, 'loading'):
    module_spec.loader.exec_module(module)
  names = sorted(n for n in getattr(module, 'CONFIGS', ()) or
                 [n for n in dir(module) if not n.startswith('_') and
                  callable(getattr(module, n))])
  fn = getattr(module, name, None)
  if fn is None or not callable(fn):
    raise UsageError(f'--config {spec!r}: {path} has no config {name!r}; '
                     f'available: {names}')
  with _config_code(spec, path, f'{name}()'):
    cfg = fn()
  if not isinstance(cfg, config_lib.TrainConfig):
    raise UsageError(f'--config {spec!r}: {name}() returned '
                     f'{type(cfg).__name__}, expected a TrainConfig')
  return cfg


def _split_overrides(extra: Sequence[str]) -> dict:
  out, i = {}, 0
  while i < len(extra):
    arg = extra[i]
    if not arg.startswith('--'):
      raise UsageError(f'unexpected argument {arg!r}; overrides look like '
                       '--mpo.duals.num_steps=10')
    key, eq, value = arg[2:].partition('=')
    if not eq:
      if i + 1 >= len(extra):
        raise UsageError(f'override --{key} needs a value')
      value = extra[i + 1]
      i += 1
    out[key] = value
    i += 1
  return out


def resolve_train_config(args, extra: Sequence[str],
                         command: str = 'train'):
  """Returns (TrainConfig, run_dir path, resume flag); raises on bad input."""
  from tandem.agents.envs import environments
  overrides = _split_overrides(extra)
  if getattr(args, 'demos', None):
    overrides['demos'] = os.path.abspath(args.demos)
  if args.num_actors is not None:
    overrides['num_actors'] = str(args.num_actors)
  if args.name is not None:
    overrides['name'] = args.name
  if args.resume:
    cfg_path = os.path.join(args.resume, 'config.json')
    if not os.path.isfile(cfg_path):
      raise UsageError(f'--resume {args.resume}: no config.json there; is it '
                       'a Tandem run directory?')
    if 'name' in overrides:
      raise UsageError('--name cannot change on --resume')
    if 'runs_root' in overrides:
      raise UsageError(f'--runs_root cannot be given with --resume: a run '
                       f'resumes in its own directory ({args.resume}); move '
                       'the directory to move the run')
    data = read_run_json(cfg_path, f'--resume {args.resume}')
    check_kind(config_lib.config_class(data), command,
                f'--resume {args.resume}')
    try:
      resumed, changed = resuming.resume_config(data, overrides)
    except resuming.StoredConfigError as e:
      raise UsageError(
          f'--resume {args.resume}: config.json fails a check of this '
          f'version of Tandem: {e}. If that field is one a resume may change '
          f'({", ".join(sorted(resuming.RESUMABLE_FIELDS))}), add '
          '--<field>=<value> with a value it accepts; otherwise resume with '
          'the code the run was started with (its commit is in '
          'config_history.jsonl)') from e
    run_dir = os.path.abspath(args.resume)
    replay_checks.check_replay_changes(
        changed, resumed, run_dir, getattr(args, 'drop_replay', False))
    cfg = in_its_folder(resumed, run_dir)
  else:
    if not args.config:
      raise UsageError('tandem train needs --config <file.py>:<name> or '
                       '--resume <run dir>')
    cfg = load_named_config(args.config)
    check_kind(type(cfg), command, f'--config {args.config}')
    cfg = config_lib.apply_overrides(cfg, overrides)
    run_dir = os.path.abspath(os.path.join(cfg.runs_root, cfg.name))
  try:
    environments.validate_environment_name(cfg.env)
  except ValueError as e:
    raise UsageError(f'env: {e}') from e
  # A new run's horizon of 0 becomes a count here; a resumed run's
  # config.json holds the count its run started with.
  return horizons.over_the_budget(cfg), run_dir, bool(args.resume)


def in_its_folder(cfg, run_dir: str):
  """`cfg` with runs_root the folder `run_dir` (an absolute path) is in,
  where the stored one names another (the run was copied or moved): what
  a resumed run's config.json and history then record. A stored path that
  resolves to that folder is kept as written, and so is a bucket path
  (under /gcs/): a Vertex AI run's runs_root is where its replicas see it,
  which this machine names through the bucket's mount, and a later cloud
  resume needs it as it was (launch/cloud/vertex.py holds the two
  together)."""
  here = os.path.dirname(run_dir)
  if (os.path.abspath(cfg.runs_root) == here or
      cloud_config.under(cfg.runs_root, cloud_config.GCS_MOUNT)):
    return cfg
  return dataclasses.replace(cfg, runs_root=here)


def _no_constants(name: str):
  """json's parse_constant: a config holds finite numbers, and a NaN would
  later compare unequal to itself (a resume would call it a change)."""
  raise ValueError(f'{name} is not a valid value: config fields are finite')


def read_run_json(path: str, named_by: str) -> dict:
  """A run directory's config.json as stored (not validated), or a
  UsageError naming the flag and value (`named_by`) that pointed at it."""
  try:
    with open(path) as f:
      data = json.load(f, parse_constant=_no_constants)
  except (OSError, ValueError, RecursionError) as e:
    raise UsageError(f'{named_by}: config.json is unreadable or invalid '
                     f'({e})') from e
  if not isinstance(data, dict):
    raise UsageError(f'{named_by}: config.json is unreadable or invalid '
                     f'(not a JSON object of fields: {type(data).__name__})')
  return data


def load_run_config_to_read(path: str, named_by: str):
  """A run's config.json for a command that reads the run without running
  it (collect-demos): what defines the run (environment, seed, networks,
  losses, rounds) must pass this version's checks; the fields a resume may
  change (budget, actors, periods, replay sizes) are not used, so values in
  them that a later check refuses are replaced by stand-ins that pass (the
  returned config's plumbing is not the run's: do not read it)."""
  data = read_run_json(path, named_by)
  try:
    return config_lib.from_dict(data)
  except ConfigError as e:
    try:
      return config_lib.from_dict(data, resuming.plumbing_stand_ins(data))
    except ConfigError as again:
      raise UsageError(f'{named_by}: config.json is unreadable or invalid '
                       f'({again}; as stored: {e})') from e


def restore_learner_state(cfg, checkpoint: str, named_by: str):
  """(program, learner state) of a run's checkpoint, for a command that
  reads the run (render, collect-demos): a UsageError where the run's
  environment cannot be made on this machine (the state's shapes come from
  it) or the checkpoint does not fit them."""
  from tandem.agents.core import checkpointing
  program = programs.for_config(cfg)
  try:
    template = program.learner_template(cfg)
  except (ValueError, ImportError) as e:
    # The first sentence: an unknown gymnasium id's error goes on to list
    # every id this machine has.
    why = str(e).split('. ')[0].rstrip('.')
    raise UsageError(f'{named_by}: its environment {cfg.env} cannot be made '
                     f'on this machine ({why})') from e
  try:
    return program, checkpointing.restore_tree(checkpoint, template)
  except checkpointing.CheckpointError as e:
    raise UsageError(f'{named_by}: {e}') from e
