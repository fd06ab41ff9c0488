"""The `tandem` command line.

  tandem train --config configs/mpo.py:cartpole [--launch local_mp|local_mt]
               [--num_actors N] [--name NAME] [--mpo.duals.num_steps=10 ...]
  tandem train --resume runs/<name> [--env_step_budget=...]
  tandem train-ail --config configs/ail.py:gail_cartpole --demos FILE.npz
               [--launch ...] [--num_actors N] [--name NAME] [--ail.kind=airl ...]
  tandem train-ail --resume runs/<name>
  tandem collect-demos --run runs/<name> --episodes N --out FILE.npz [--seed S]
                      [--overwrite]
  tandem plot runs/<name> [--out PNG]

Everything that can be checked is checked before any process starts: the
config (every field), the environment name, the run directory (not in use,
not silently reused) and, on resume, the checkpoint and counter files.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional, Sequence

from tandem.agents.mpo.config import ConfigError
from tandem.launch import config as config_lib

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(ValueError):
  """Bad input found before launch."""


def _program(command: str):
  """The program module of a command: launch.mpo or launch.ail."""
  if command == 'train-ail':
    from tandem.launch import ail
    return ail
  from tandem.launch import mpo
  return mpo


def _check_kind(cfg, command: str, where: str) -> None:
  """cfg: a config, or its class."""
  cls = cfg if isinstance(cfg, type) else type(cfg)
  ail = issubclass(cls, config_lib.AILTrainConfig)
  if command == 'train-ail' and not ail:
    raise UsageError(f'{where}: an MPO config; train it with tandem train')
  if command == 'train' and ail:
    raise UsageError(f'{where}: an adversarial imitation config; train it '
                     'with tandem train-ail')


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
  module_spec.loader.exec_module(module)
  names = sorted(n for n in getattr(module, 'CONFIGS', ()) or
                 [n for n in dir(module) if not n.startswith('_') and
                  callable(getattr(module, n))])
  fn = getattr(module, name, None)
  if fn is None or not callable(fn):
    raise UsageError(f'--config {spec!r}: {path} has no config {name!r}; '
                     f'available: {names}')
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


def resolve_train_config(args, extra: Sequence[str], command: str = 'train'):
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
    data = _read_run_json(cfg_path, f'--resume {args.resume}')
    _check_kind(config_lib.config_class(data), command,
                f'--resume {args.resume}')
    try:
      resumed, changed = config_lib.resume_config(data, overrides)
    except config_lib.StoredConfigError as e:
      raise UsageError(
          f'--resume {args.resume}: config.json fails a check of this '
          f'version of Tandem: {e}. If that field is one a resume may change '
          f'({", ".join(sorted(config_lib.RESUMABLE_FIELDS))}), add '
          '--<field>=<value> with a value it accepts; otherwise resume with '
          'the code the run was started with (its commit is in '
          'config_history.jsonl)') from e
    _check_replay_changes(changed, resumed, os.path.abspath(args.resume),
                          getattr(args, 'drop_replay', False))
    cfg = resumed
    run_dir = os.path.abspath(args.resume)
  else:
    if not args.config:
      raise UsageError('tandem train needs --config <file.py>:<name> or '
                       '--resume <run dir>')
    cfg = load_named_config(args.config)
    _check_kind(cfg, command, f'--config {args.config}')
    cfg = config_lib.apply_overrides(cfg, overrides)
    run_dir = os.path.abspath(os.path.join(cfg.runs_root, cfg.name))
  try:
    environments.validate_environment_name(cfg.env)
  except ValueError as e:
    raise UsageError(f'env: {e}') from e
  return cfg, run_dir, bool(args.resume)


# A restored Reverb table keeps the settings it was created with.
REPLAY_TABLE_FIELDS = ('replay_max_size', 'replay_min_size',
                       'samples_per_insert', 'replay_error_buffer')


def _replay_checkpoint_exists(run_dir: str) -> bool:
  from tandem.agents.runtime.rundir import RunDir
  path = RunDir(run_dir).replay_checkpoints
  return os.path.isdir(path) and bool(os.listdir(path))


def _check_replay_changes(changed: dict, cfg, run_dir: str,
                          drop_replay: bool) -> None:
  """Refuses a resume that changes the replay table's settings while the
  run's buffer would be restored with the old ones."""
  fields = [f for f in REPLAY_TABLE_FIELDS if f in changed]
  if (fields and cfg.replay_checkpoints and not drop_replay and
      _replay_checkpoint_exists(run_dir)):
    raise UsageError(
        f'--resume {run_dir}: {", ".join(fields)} changed, but the run\'s '
        'replay buffer (checkpoints/replay/) is restored with the settings it '
        'was created with; resume without changing them, or add '
        '--drop_replay to start from an empty buffer (refilled to '
        'replay_min_size)')


def _check_replay_checkpoint(cfg, run_dir: str, drop_replay: bool) -> None:
  """Refuses a resume whose replay checkpoint (the one Reverb would load)
  is incomplete or damaged in its framing (replay_checkpoints.check): the
  replay node would die at start, after every other node was launched, or
  Reverb would start from an empty buffer without a word."""
  from tandem.agents.replay import replay_checkpoints
  from tandem.agents.runtime.rundir import RunDir
  if not cfg.replay_checkpoints or drop_replay:
    return
  try:
    path = replay_checkpoints.latest(RunDir(run_dir).replay_checkpoints)
    if path is not None:
      replay_checkpoints.check(path)
  except (OSError, replay_checkpoints.ReplayCheckpointError) as e:
    raise UsageError(
        f'--resume {run_dir}: the replay buffer\'s checkpoint is incomplete '
        f'or damaged: {e}. Restore that file, or add --drop_replay to move '
        'checkpoints/replay/ aside (kept, not deleted) and start from an '
        'empty buffer (refilled to replay_min_size)') from e


def _drop_replay(rd, segment: int) -> Optional[str]:
  """Moves the replay checkpoint aside (never deletes it); returns where."""
  if not _replay_checkpoint_exists(rd.root):
    return None
  dest = rd.dropped_replay(segment)
  os.replace(rd.replay_checkpoints, dest)
  return dest


def _read_run_json(path: str, named_by: str) -> dict:
  """A run directory's config.json as stored (not validated), or a
  UsageError naming the flag and value (`named_by`) that pointed at it."""
  try:
    with open(path) as f:
      data = json.load(f)
  except (OSError, ValueError) as e:
    raise UsageError(f'{named_by}: config.json is unreadable or invalid '
                     f'({e})') from e
  if not isinstance(data, dict):
    raise UsageError(f'{named_by}: config.json is unreadable or invalid '
                     f'(not a JSON object of fields: {type(data).__name__})')
  return data


def _load_run_config(path: str, named_by: str):
  """A run directory's config.json, validated, or a UsageError naming the
  flag and value (`named_by`) that pointed at the run."""
  data = _read_run_json(path, named_by)
  try:
    return config_lib.from_dict(data)
  except ConfigError as e:
    raise UsageError(f'{named_by}: config.json is unreadable or invalid '
                     f'({e})') from e


def _load_run_config_to_read(path: str, named_by: str):
  """A run's config.json for a command that reads the run without running
  it (collect-demos): what defines the run (environment, seed, networks,
  losses, rounds) must pass this version's checks; the fields a resume may
  change (budget, actors, periods, replay sizes) are not used, so values in
  them that a later check refuses are replaced by stand-ins that pass (the
  returned config's plumbing is not the run's: do not read it)."""
  data = _read_run_json(path, named_by)
  try:
    return config_lib.from_dict(data)
  except ConfigError as e:
    try:
      return config_lib.from_dict(data, config_lib.plumbing_stand_ins(data))
    except ConfigError as again:
      raise UsageError(f'{named_by}: config.json is unreadable or invalid '
                       f'({again}; as stored: {e})') from e


def check_demonstrations(cfg, run_dir: Optional[str] = None) -> dict:
  """Loads the demonstrations as the learner will, so a file that does not
  fit the environment fails before launch, naming the file and array; on a
  resume (run_dir holding demos.json), also refuses a file whose contents
  changed since the run started: the learner draws its expert batches from
  the file in-graph, and a resumed run must draw what the first one would."""
  from tandem.agents.ail import demonstrations
  if not cfg.demos:
    raise UsageError('tandem train-ail needs --demos FILE.npz (expert '
                     'demonstrations; README: "Demonstration files")')
  try:
    demos = demonstrations.load_for_environment(cfg.demos, cfg.env)
    note = demonstrations.flat_order_note(cfg.demos, cfg.env)
  except demonstrations.DemoError as e:
    raise UsageError(f'--demos: {e}') from e
  if note:
    print(note, file=sys.stderr)
  record = _demos_record(cfg.demos, demos)
  path = os.path.join(run_dir, 'demos.json') if run_dir else None
  if path and os.path.isfile(path):
    try:
      with open(path) as f:
        first = json.load(f)
      if not isinstance(first, dict):
        raise ValueError(f'a JSON object expected, got {type(first).__name__}')
    except (OSError, ValueError) as e:
      raise UsageError(
          f'{path}: unreadable ({e}); it records the demonstrations file '
          'this run started with (path, sha256, transitions), which a '
          'resume must match') from e
    if first.get('sha256') != record['sha256']:
      raise UsageError(
          f'--demos: {cfg.demos} (sha256 {record["sha256"][:12]}…, '
          f'{record["transitions"]} transitions) is not the file this run '
          f'started with ({first.get("path")}, sha256 '
          f'{str(first.get("sha256"))[:12]}…, {first.get("transitions")} '
          'transitions); resume with that file, or start a new run')
  return record


def _demos_record(path: str, demos) -> dict:
  import hashlib
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return {'path': os.path.abspath(path), 'sha256': digest.hexdigest(),
          'transitions': int(demos.num_transitions),
          'episodes': int(demos.num_episodes),
          'terminal_transitions': int((demos.discount == 0).sum())}


def terminal_note(record: dict, cfg) -> Optional[str]:
  """A warning when the expert's episodes terminate, or the generator's
  may (environments.may_terminate, even where the expert's never do):
  without DAC's absorbing states the learned reward's sign biases episode
  length."""
  from tandem.agents.envs import environments
  n = record.get('terminal_transitions', 0)
  if n:
    where = (f'{n} of the demonstrations\' {record["episodes"]} episodes '
             'end in a terminal state (discount 0)')
  elif environments.may_terminate(cfg.env):
    where = (f'{cfg.env}\'s episodes may end in a terminal state (discount '
             '0), although none of the demonstrations\' '
             f'{record["episodes"]} episodes does')
  else:
    return None
  bias = {'neg_log_one_minus_d': 'is positive, so it pays the generator to '
          'survive', 'log_d': 'is negative, so it pays the generator to end '
          'episodes early'}.get(cfg.ail.reward, 'has no fixed sign, but the '
                                'zero value after a terminal step still '
                                'biases how long episodes last')
  return (f'note: {where}. Tandem does not implement '
          "DAC's absorbing states (Kostrikov et al. 2019, Sec. 4.2): the "
          f'reward (ail.reward={cfg.ail.reward}) {bias}. Compare '
          'agent_terminal_fraction with expert_terminal_fraction in '
          'logs/discriminator.csv.')


def final_summary(final: dict) -> str:
  """The closing lines of a finished launch, from final.json. The return
  is the final evaluation's, of the checkpoint at `checkpoint_counts` (the
  counts its evaluator.csv row carries; actors may sync a few env steps
  after the learner stopped, which `counts`, read after the evaluation,
  include); throughput is over the counter's final counts."""
  from tandem.agents.runtime import counting
  fps = counting.since_start(final['counts'])['env_steps_per_s_since_start']
  at = final.get('checkpoint_counts') or final['counts']
  return (f'\nthroughput: {fps:.1f} env steps/s over the time the run has '
          'run (all its launches)\n'
          f"\nfinal evaluation return: {final['final_eval_return']:.1f} "
          f"(env steps {at['env_steps']}, learner steps "
          f"{at['learner_steps']})")


def expected_updates(cfg) -> dict:
  """The updates the budget lets the rate limiter pay for, by the count
  that keys each schedule: {'mpo': generator/MPO steps, 'ail':
  discriminator steps (adversarial runs only)}. Each sampled row is one
  batch element; an adversarial round splits its rows between the two."""
  rows = (cfg.env_step_budget - cfg.replay_min_size) * cfg.samples_per_insert
  if not isinstance(cfg, config_lib.AILTrainConfig):
    return {'mpo': rows / cfg.mpo.batch_size}
  a = cfg.ail
  gen = a.generator_steps_per_round * cfg.mpo.batch_size
  disc = a.discriminator_steps_per_round * a.batch_size
  rounds = rows / (gen + disc)
  return {'mpo': rounds * a.generator_steps_per_round,
          'ail': rounds * a.discriminator_steps_per_round}


def schedule_note(cfg) -> Optional[str]:
  """A warning when an annealing horizon is far from the updates the budget
  pays for: with a horizon twice as long, the run ends before half the
  schedule; with one half as long, the value sits at its final one for more
  than half the run. Learning-rate schedules run over their group's
  schedule_horizon; the adversarial behaviour-cloning weight over
  ail.bc_decay_steps generator steps. Neither changes on resume, so a resume
  that extends the budget warns too."""
  updates = expected_updates(cfg)
  anneals = []  # (what, horizon field, horizon, updates paid for)
  fields = config_lib.leaf_fields(cfg)
  for path, kind in fields.items():
    if not path.endswith('.schedule') or kind == 'constant':
      continue
    if fields[path[:-len('schedule')] + 'final_fraction'] == 1.0:
      continue  # it ends where it starts: a constant rate
    group = path.split('.')[0]
    anneals.append((f'{path}={kind}', f'{group}.schedule_horizon',
                    getattr(cfg, group).schedule_horizon, updates[group]))
  ail = getattr(cfg, 'ail', None)
  if ail is not None and ail.bc_weight > 0 and \
      ail.bc_final_weight != ail.bc_weight:
    anneals.append(('ail.bc_weight', 'ail.bc_decay_steps',
                    ail.bc_decay_steps, updates['mpo']))
  notes = []
  for what, name, horizon, steps in anneals:
    if horizon > 2 * steps:
      notes.append(f'{what} runs over {name}={horizon} steps, but the '
                   f'budget pays for about {steps:.0f}: the run ends '
                   f'{100 * steps / horizon:.0f}% of the way through it')
    elif horizon < steps / 2:
      notes.append(f'{what} reaches its final value at {name}={horizon} '
                   f'steps, {100 * horizon / steps:.0f}% of the about '
                   f'{steps:.0f} the budget pays for')
  if not notes:
    return None
  return ('note: ' + '; '.join(notes) + ' ((env_step_budget - '
          'replay_min_size) · samples_per_insert rows sampled). The horizon '
          'is fixed for the run; set it at launch to change this.')


_CODE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_version(root: str = _CODE_ROOT) -> Optional[dict]:
  """The git commit the code under `root` was checked out at, and whether
  tracked files differed from it; None outside a git checkout (a Docker
  image built without .git) or without git. A figure in BENCHMARKS.md can
  then be traced to the code that produced it."""
  def git(*args):
    # --no-optional-locks: status must not take the index lock from under
    # a git command the user runs at the same moment.
    return subprocess.run(['git', '--no-optional-locks', '-C', root, *args],
                          capture_output=True, text=True, errors='replace',
                          timeout=10, check=True).stdout.strip()
  try:
    commit = git('rev-parse', 'HEAD')
    dirty = bool(git('status', '--porcelain', '--untracked-files=no'))
  except (OSError, subprocess.SubprocessError):
    return None
  return {'commit': commit, 'dirty': dirty}


def record_config_history(rd, cfg, resume: bool) -> int:
  """Appends one line per launch to config_history.jsonl: when, whether it
  was a resume, the fields that differ from the previous config, and the
  code's commit (`code_version`). Returns this launch's segment number (1
  for the first launch)."""
  changed = {}
  if resume and os.path.isfile(rd.config):
    try:
      old = config_lib.stored_fields(
          _read_run_json(rd.config, f'--resume {rd.root}'))
    except ConfigError as e:
      raise UsageError(f'--resume {rd.root}: config.json: {e}') from e
    changed = {p: {'from': a, 'to': b} for p, (a, b) in
               config_lib.check_resume_overrides(old, cfg).items()}
  path = os.path.join(rd.root, 'config_history.jsonl')
  lines, torn = 0, False
  if os.path.isfile(path):
    with open(path, 'rb') as f:
      data = f.read()
    lines = sum(1 for line in data.splitlines() if line.strip())
    torn = bool(data) and not data.endswith(b'\n')
  # Never a number an earlier launch used: its node logs, crash reports and
  # discarded rows live under segment-<k> folders a reuse would overwrite.
  # A line cut short (disk full, power cut) would otherwise swallow the
  # following ones and stop the count.
  segment = 1 + max(lines, rd.highest_segment())
  with open(path, 'a') as f:
    if torn:
      f.write('\n')
    f.write(json.dumps({'time': time.time(), 'resume': resume,
                        'segment': segment, 'changed': changed,
                        'code': code_version()},
                       default=list) + '\n')
  return segment


def node_names(cfg) -> list[str]:
  """The nodes of a program, as their crash reports and stop markers name
  them."""
  return (['replay', 'counter', 'learner', 'evaluator', 'limiter'] +
          [f'actor_{i}' for i in range(cfg.num_actors)])


def _report_stops(rd, cfg, segment: int, stop_time) -> list[str]:
  """Writes nodes/segment-<k>/stop_times.json (seconds from the stop to
  each node's end) and reports nodes that neither finished nor crashed:
  those were killed, mostly by Launchpad's SIGKILL once stop_grace_s ran
  out. Returns their names."""
  from tandem.agents.core.files import write_json_atomic
  from tandem.agents.runtime.rundir import read_errors, read_stopped
  finished = read_stopped(rd)
  crashed = set(read_errors(rd))
  killed = [n for n in node_names(cfg) if n not in finished and
            n not in crashed]
  seconds = ({n: round(t - stop_time, 3) for n, t in finished.items()}
             if stop_time else {})
  os.makedirs(rd.segment_nodes(segment), exist_ok=True)
  write_json_atomic(os.path.join(rd.segment_nodes(segment), 'stop_times.json'),
                    {'stop_time': stop_time, 'seconds_to_stop': seconds,
                     'killed': killed, 'crashed': sorted(crashed),
                     'stop_grace_s': cfg.stop_grace_s})
  if killed:
    print(f'\nnode(s) {", ".join(killed)} ended without finishing their stop: '
          'killed by a signal (Launchpad\'s SIGKILL once stop_grace_s='
          f'{cfg.stop_grace_s:g} s ran out, or from outside). What they had '
          'not saved is lost; the learner resumes from its latest checkpoint. '
          'If the grace period was too short, raise stop_grace_s. Continue '
          f'with: {_resume_command(cfg, rd.root)}', file=sys.stderr)
  return killed


def _command(cfg) -> str:
  return 'train-ail' if isinstance(cfg, config_lib.AILTrainConfig) \
      else 'train'


def _resume_command(cfg, run_dir: str) -> str:
  """The command line every stop and failure hint names."""
  return f'tandem {_command(cfg)} --resume {run_dir}'


def _failure_resume_command(errors: dict, cfg, run_dir: str) -> str:
  """The closing hint of a failed launch, given its crash reports `errors`
  (rundir.read_errors): a replay checkpoint that did not load fails every
  resume the same way, so that one names --drop_replay."""
  from tandem.agents.nodes.replay_node import ReplayCheckpointLoadError
  command = _resume_command(cfg, run_dir)
  if errors.get('replay', '').startswith(
      ReplayCheckpointLoadError.__name__ + ':'):
    return (f'{command} --drop_replay, which keeps the replay checkpoint '
            'that did not load under checkpoints/ and starts from an empty '
            'buffer')
  return command


def _describe_failure(e: BaseException) -> str:
  """Launchpad's 'exited with code -9' means killed by signal 9."""
  import re
  text = str(e)
  m = re.search(r'exited with code (-\d+)', text)
  if m:
    import signal
    num = -int(m.group(1))
    try:
      name = signal.Signals(num).name
    except ValueError:
      name = f'signal {num}'
    text += f' (killed by {name})'
  return text


def _keep_off_accelerators(launch: str) -> None:
  """Under local_mp the launcher's own JAX work (restoring the checkpoint
  to validate a resume) runs on the CPU: JAX would otherwise claim most of
  a GPU's memory in the launcher, before the learner's process starts.
  local_mt runs the learner in this process, so it keeps the default.
  (jax.config, not JAX_PLATFORMS: node processes inherit the environment.)"""
  if launch != 'local_mp':
    return
  import jax
  jax.config.update('jax_platforms', 'cpu')


def _reconcile(rd, checkpoint: str, segment: int) -> None:
  """Counter and logs continue from the learner checkpoint's counts."""
  from tandem.agents.runtime import resume as resume_lib
  done = resume_lib.reconcile(rd, checkpoint, segment)
  if done is None:
    print('the checkpoint carries no counts; counts continue from '
          'counter.json')
    return
  c, b = done['counts'], done['before']
  if c != {k: b.get(k, 0) for k in c} or done['discarded_rows']:
    print(f"counts continue from the checkpoint: env steps {c['env_steps']} "
          f"(counter.json had {b.get('env_steps')}), learner steps "
          f"{c['learner_steps']} (had {b.get('learner_steps')})")
  if done['discarded_rows']:
    print('log rows past the checkpoint moved to '
          f'{resume_lib.discarded_dir(rd, segment)}: {done["discarded_rows"]}')
  if done['torn_lines']:
    print('log lines cut short (no line end) moved to '
          f'{resume_lib.discarded_dir(rd, segment)}/torn: '
          f'{sorted(done["torn_lines"])}')


def empty_replay_note(cfg, rd) -> Optional[str]:
  """A warning when a resume starts from an empty buffer with no more of
  the budget left than replay_min_size: the learner would not step again."""
  from tandem.agents.runtime import counting
  env_steps = counting.Counter(rd.counter, restore=True).get_counts()[
      'env_steps']
  left = cfg.env_step_budget - env_steps
  if not 0 < left <= cfg.replay_min_size:
    return None
  return (f'note: replay starts empty and {left} env steps of the budget are '
          f'left, not more than replay_min_size={cfg.replay_min_size}: the '
          'learner will take no step before the final evaluation; raise '
          '--env_step_budget to train on')


def _set_aside_unfinished_final(rd, segment: int) -> None:
  from tandem.agents.runtime import resume as resume_lib
  if resume_lib.set_aside_unfinished_final(rd, segment):
    print('the final evaluation of the stopped launch (no final.json) moved '
          f'to {resume_lib.discarded_dir(rd, segment)}: this launch evaluates '
          'that checkpoint again')


def _archive_final(rd, segment: int) -> Optional[str]:
  """Moves a previous launch's final.json (a run resumed past its budget)
  beside that launch's node logs, nodes/segment-<k-1>/final.json, so the
  run directory's final.json always belongs to this launch and the earlier
  final evaluation is kept. Returns where it went, or None."""
  if not os.path.exists(rd.final):
    return None
  kept = rd.segment_nodes(segment - 1)
  os.makedirs(kept, exist_ok=True)
  dest = os.path.join(kept, 'final.json')
  os.replace(rd.final, dest)
  return dest


def _refuse_if_nodes_alive(run_dir: str) -> None:
  """A launcher killed hard leaves its nodes to stop on their own (they
  poll it, then checkpoint and exit); until the last has, they still write
  into the run directory, so no new program may start there."""
  from tandem.agents.runtime import supervision
  if not supervision.nodes_running(run_dir):
    return
  pids = supervision.program_processes(run_dir)
  raise UsageError(
      f'run directory {run_dir}: processes of an earlier program on it are '
      f'still running ({", ".join(map(str, pids)) or "pids unknown"}); they '
      'stop by themselves within stop_grace_s of their launcher\'s death. '
      'Wait for them (or kill them), then retry')


def _load_for_resume(checkpoint: str, template) -> None:
  """Reads what a resume reads from `checkpoint` (the learner's state and
  the counts reconcile rolls back to); raises CheckpointError."""
  from tandem.agents.core import checkpointing
  from tandem.agents.runtime import resume as resume_lib
  _, meta = checkpointing.restore_with_metadata(checkpoint, template)
  resume_lib.checkpoint_counts(checkpoint, meta)


def _older_checkpoint_hint(rd, latest: str, template) -> str:
  """How to resume from the checkpoint before a damaged `latest`, where
  that one loads (one that does not fit this config fails the same way)."""
  from tandem.agents.core import checkpointing
  older = checkpointing.list_checkpoints(rd.learner_checkpoints)[:-1]
  if not older:
    return ''
  try:
    _load_for_resume(older[-1], template)
  except checkpointing.CheckpointError:
    return ''
  return (f'; the one before it, {older[-1]}, loads: move {latest} out of '
          f'{rd.learner_checkpoints} to resume from that one (counts and '
          'logs roll back to it)')


def _left_by_a_run(rd) -> Optional[str]:
  """What a run left in `rd` that a fresh launch would write over, named,
  or None. Not only config.json: a new counter would restart at 0 over
  counter.json, new rows go under the old header, and the new low-step
  checkpoints be the ones pruned."""
  from tandem.agents.core import checkpointing
  if os.path.exists(rd.config):
    return 'config.json'
  if os.path.exists(rd.counter):
    return 'counter.json'
  found = checkpointing.list_checkpoints(rd.learner_checkpoints)
  if found:
    return os.path.relpath(found[-1], rd.root)
  logs = sorted(os.listdir(rd.logs)) if os.path.isdir(rd.logs) else []
  csvs = [n for n in logs if n.endswith('.csv')]
  return os.path.join('logs', csvs[0]) if csvs else None


def check_resumable(cfg, run_dir: str, program=None) -> Optional[str]:
  """Loads what --resume will load, so a bad file fails before launch."""
  from tandem.agents.core import checkpointing
  from tandem.agents.runtime import counting
  from tandem.agents.runtime import resume as resume_lib
  from tandem.agents.runtime.rundir import RunDir
  if program is None:
    from tandem.launch import mpo as program
  rd = RunDir(run_dir)
  latest = checkpointing.latest(rd.learner_checkpoints)
  if latest is None:
    raise UsageError(f'--resume {run_dir}: no learner checkpoint in '
                     f'{rd.learner_checkpoints}')
  template = program.learner_template(cfg)
  try:
    _load_for_resume(latest, template)
  except checkpointing.CheckpointError as e:
    raise UsageError(f'--resume {run_dir}: {e}'
                     f'{_older_checkpoint_hint(rd, latest, template)}') from e
  why = program.checkpoint_mismatch(cfg, checkpointing.read_metadata(latest))
  if why:
    raise UsageError(f'--resume {run_dir}: checkpoint {latest}: {why}')
  try:
    counting.Counter(rd.counter, restore=True)
  except counting.CounterStateError as e:
    raise UsageError(f'--resume {run_dir}: {e}') from e
  try:
    resume_lib.check_logs(rd)  # reconcile reads them after writing begins
  except resume_lib.LogFileError as e:
    raise UsageError(f'--resume {run_dir}: {e}') from e
  return latest


def _progress_line(progress: dict) -> str:
  c = progress['counts']
  ev = progress.get('last_eval_return')
  eta = progress.get('eta_s')
  # An adversarial run's learner steps are its generator's (MPO) steps.
  disc = (f"{progress.get('discriminator_steps_per_s', 0.0):6.1f} "
          'discriminator/s | ' if c.get('discriminator_steps') else '')
  return (f"env steps {c['env_steps']:>8d}/{progress['budget']} | "
          f"{progress['env_steps_per_s']:7.1f} env/s | "
          f"{progress['learner_steps_per_s']:6.1f} learner/s | {disc}"
          f"eval {'-' if ev is None else f'{ev:7.1f}'} | "
          f"to budget {'-' if eta is None else f'{eta/60:5.1f} min'}")


def _watch_progress(path: str, stop: threading.Event, period: float = 5.0):
  tty = sys.stdout.isatty()
  device_shown = False
  while not stop.wait(period):
    try:
      with open(path) as f:
        progress = json.load(f)
      line = _progress_line(progress)
    except (OSError, ValueError, KeyError):
      continue
    if not device_shown and progress.get('learner_device'):
      print(f"learner device: {progress['learner_device']}", flush=True)
      device_shown = True
    print(('\r' + line) if tty else line, end='' if tty else '\n',
          flush=True)


def _print_failure(errors: dict, nodes_dir: str) -> None:
  if errors:
    for node, text in errors.items():
      print(f'\nnode {node} crashed:\n{text}', file=sys.stderr)
    return
  # A node that died without Python (e.g. the Reverb server): show the tail
  # of any node log that mentions an error.
  print('\na node exited with an error; node logs under '
        f'{nodes_dir}:', file=sys.stderr)
  for name in sorted(os.listdir(nodes_dir)) if os.path.isdir(nodes_dir) \
      else []:
    p = os.path.join(nodes_dir, name)
    if os.path.isdir(p):
      continue
    text = open(p, errors='replace').read()
    if 'Traceback' in text or 'Error' in text:
      print(f'--- {name} (last lines)\n' + '\n'.join(text.splitlines()[-15:]),
            file=sys.stderr)


def train(args, extra, command: str = 'train') -> int:
  # First, so nothing the launcher does below (imports, checks) can start
  # JAX on an accelerator.
  _keep_off_accelerators(args.launch)
  cfg, run_dir, resume = resolve_train_config(args, extra, command)
  note = schedule_note(cfg)
  if note:  # on stderr: --show_config's stdout is the config alone
    print(note, file=sys.stderr)
  if getattr(args, 'show_config', False):
    # The named configs and a run's config.json differ from the class
    # defaults that --help lists; this shows what a launch would use.
    print(config_lib.describe(cfg))
    return EXIT_OK
  program_lib = _program(command)
  demos_record = None
  if isinstance(cfg, config_lib.AILTrainConfig):
    demos_record = check_demonstrations(cfg, run_dir if resume else None)
    note = terminal_note(demos_record, cfg)
    if note:
      print(note)
  from tandem.agents.runtime.rundir import Lock, RunDir
  from tandem.agents.core.files import write_json_atomic
  rd = RunDir(run_dir)
  left = None if resume else _left_by_a_run(rd)
  if left == 'config.json':
    raise UsageError(f'run directory {run_dir} already holds a run; continue '
                     f'it with --resume {run_dir}, or pick another --name')
  if left:
    raise UsageError(f'run directory {run_dir} holds what a run left ({left}) '
                     'but no config.json, so it cannot be resumed; pick '
                     'another --name, or move that out of the directory')
  if cfg.replay_checkpoints and any(c in run_dir for c in '*?['):
    # Reverb finds (and prunes) its checkpoints by globbing <dir>/*, so such
    # a path matches nothing: a table saved under /tmp/g[2]/replay came
    # back with 0 of its 10 items (the same code under /tmp/g1x: 10).
    raise UsageError(
        f'run directory {run_dir}: holds one of * ? [, which break how Reverb '
        'finds its replay checkpoints (nothing would be restored or pruned); '
        'pick a --name or --runs_root without them, or add '
        '--replay_checkpoints=false')
  lock = Lock(rd)
  try:
    lock.acquire()  # refuses a second program on the same run directory
  except OSError as e:  # RunDirLocked is not one: main() reports it
    flag = '--resume' if resume else '--runs_root'
    raise UsageError(f'run directory {run_dir}: cannot be created or locked '
                     f'({e}); check {flag}') from e
  try:
    _refuse_if_nodes_alive(run_dir)
    if resume:
      latest = check_resumable(cfg, run_dir, program_lib)
      # After the check that no node of an earlier launch is alive: such a
      # replay node may still be writing (and pruning) its checkpoints.
      _check_replay_checkpoint(cfg, run_dir,
                               getattr(args, 'drop_replay', False))
      print(f'resuming from {latest}')
  except BaseException:
    # Refused before anything started: the directory is free again, also
    # for a caller that goes on in this process (tests, notebooks).
    lock.release()
    raise
  rd.make()
  segment = record_config_history(rd, cfg, resume)
  demos_json = os.path.join(rd.root, 'demos.json')
  if demos_record is not None and not os.path.exists(demos_json):
    write_json_atomic(demos_json, demos_record)
  # The previous launch's crash reports stay, under errors/segment-<k>/.
  rd.archive_errors(segment - 1)
  if os.path.isdir(rd.stopped):  # the previous launch's stop markers
    shutil.rmtree(rd.stopped)
  if resume:
    _set_aside_unfinished_final(rd, segment)
  _archive_final(rd, segment)
  removed = rd.remove_stray_temporaries()
  if resume:
    _reconcile(rd, latest, segment)
    refilled = True
    if getattr(args, 'drop_replay', False):
      dropped = _drop_replay(rd, segment)
      if dropped:
        print(f'replay buffer dropped (moved to {dropped}); delete it when '
              'no longer wanted')
    elif cfg.replay_checkpoints and _replay_checkpoint_exists(run_dir):
      from tandem.agents.replay import replay_checkpoints
      latest_replay = replay_checkpoints.latest(rd.replay_checkpoints)
      refilled = not latest_replay
      print(f'replay buffer: restored from {latest_replay}' if latest_replay
            else 'replay buffer: no complete checkpoint in '
            'checkpoints/replay/; starting from an empty buffer')
    note = refilled and empty_replay_note(cfg, rd)
    if note:
      print(note)
  # Last: the next --resume compares its overrides with this file, so it
  # must not hold new replay settings unless the old buffer was moved aside.
  write_json_atomic(rd.config, config_lib.to_dict(cfg))
  if removed:
    print(f'removed {len(removed)} unfinished temporary file(s) a killed '
          f'program left: {removed}')
  # Launchpad reads this when its file-output launcher is first imported;
  # each launch writes its node logs to its own segment folder.
  nodes_dir = rd.segment_nodes(segment)
  os.environ['LAUNCHPAD_LOGGING_DIR'] = nodes_dir
  # ... but only if that module is not imported yet, and acme imports
  # launchpad (hence it) when our node modules load: set what it read.
  from launchpad.launch.run_locally import launch_local_output_to_files
  launch_local_output_to_files._LOGGING_DIR = nodes_dir  # pylint: disable=protected-access
  from tandem.agents.runtime import supervision
  supervision.announce(run_dir, cfg.stop_grace_s)  # before any node starts
  import launchpad as lp
  from absl import flags
  # Read by Launchpad's worker manager when lp.launch creates it.
  flags.FLAGS.lp_termination_notice_secs = int(math.ceil(cfg.stop_grace_s))

  program = program_lib.build_program(cfg, run_dir, resume=resume,
                                      segment=segment)
  print(f'run directory: {run_dir}\nlaunching {args.launch} with '
        f'{cfg.num_actors} actors; budget {cfg.env_step_budget} env steps')
  stop_watch = threading.Event()
  watcher = threading.Thread(target=_watch_progress,
                             args=(rd.progress, stop_watch), daemon=True)
  if args.launch == 'local_mp':
    manager = lp.launch(program, launch_type='local_mp',
                        terminal='output_to_files',
                        local_resources=program_lib.local_resources(
                            'local_mp'))
    # When the grace period runs out, Launchpad SIGKILLs the nodes still
    # stopping and, by default, its own launcher too (exit 137, nothing
    # reported). Every local_mp node is a process, so the launcher can
    # stay alive to say which node was killed and how to continue.
    manager._kill_main_thread = False  # pylint: disable=protected-access
  else:
    manager = lp.launch(program, launch_type='local_mt')
  watcher.start()
  # Only local_mp has node processes to watch; local_mt's are threads.
  deaths = supervision.DeathWatch(run_dir, expected=len(node_names(cfg)))
  if args.launch == 'local_mp':
    deaths.start()
  # When the stop begins (Ctrl-C, a failed node, the limiter's lp.stop()):
  # each node's stop path is timed from here.
  stop_seen = []
  threading.Thread(target=lambda: (manager.stop_event().wait(),
                                   stop_seen.append(time.time())),
                   daemon=True).start()
  failed = False
  stop_time = None
  try:
    manager.wait()
  except KeyboardInterrupt:
    stop_watch.set()
    stop_time = time.time()
    print('\ninterrupted; stopping the program', file=sys.stderr)
    manager.stop_and_wait()
    if not _report_stops(rd, cfg, segment, stop_time):
      print(f'continue with: {_resume_command(cfg, run_dir)}',
            file=sys.stderr)
    return EXIT_INTERRUPTED
  except BaseException as e:  # a node failed; the manager stops the rest
    failed = True
    stop_time = time.time()
    print(f'\nprogram failed: {_describe_failure(e)}', file=sys.stderr)
    first = deaths.first(wait_s=2.0)
    if first is not None:
      print(f'the first node process to end was {first[1]} (pid {first[0]})',
            file=sys.stderr)
    try:
      manager.wait(raise_error=False)
    except BaseException:
      pass
  finally:
    stop_watch.set()
    deaths.stop()
  if stop_seen:
    stop_time = stop_seen[0]
  elif stop_time is None and os.path.exists(rd.final):
    with open(rd.final) as f:
      stop_time = json.load(f).get('stop_time')
  _report_stops(rd, cfg, segment, stop_time)
  # Crash reports only: errors/ also holds survived environment faults and
  # the archived reports of earlier launches.
  from tandem.agents.runtime.rundir import read_errors
  errors = read_errors(rd)
  if failed or errors:
    _print_failure(errors, nodes_dir)
    from tandem.agents.core import checkpointing
    latest = checkpointing.latest(rd.learner_checkpoints)
    if latest:
      print(f'latest learner checkpoint: {latest}', file=sys.stderr)
    print(f'\nrun directory: {run_dir} (continue with: '
          f'{_failure_resume_command(errors, cfg, run_dir)})',
          file=sys.stderr)
    return EXIT_FAILED
  if not os.path.exists(rd.final):
    # No node failed, yet the budget was not reached: the program was
    # stopped from outside (Ctrl-C, SIGTERM); the nodes saved their state.
    print('\nprogram stopped before its budget; continue with: '
          f'{_resume_command(cfg, run_dir)}', file=sys.stderr)
    return EXIT_INTERRUPTED
  with open(rd.final) as f:
    final = json.load(f)
  print(final_summary(final) + f'\nrun directory: {run_dir}')
  lock.release()
  return EXIT_OK


def collect_demos(args) -> int:
  """Records a run's mean-action policy (latest checkpoint) as a
  demonstrations file, then loads it back through the loader."""
  from tandem.agents.ail import demonstrations
  from tandem.agents.core import checkpointing
  from tandem.agents.envs import environments
  from tandem.agents.runtime.rundir import RunDir
  rd = RunDir(os.path.abspath(args.run))
  if not os.path.isfile(rd.config):
    raise UsageError(f'--run {args.run}: no config.json there; is it a '
                     'Tandem run directory?')
  if args.episodes < 1:
    raise UsageError(f'--episodes: expected an integer >= 1, got '
                     f'{args.episodes}')
  # Before the episodes are collected, not after: they can take minutes.
  out_dir = os.path.dirname(os.path.abspath(args.out))
  # A real write: os.access does not see every refusal (root-squashed
  # network mounts, ACLs, quotas).
  try:
    with tempfile.TemporaryFile(dir=out_dir):
      pass
  except OSError as e:
    raise UsageError(f'--out {args.out}: the directory {out_dir} does not '
                     f'exist or is not writable ({e.strerror})') from e
  # A demonstrations file may be the only copy of an expert's episodes.
  if os.path.lexists(args.out) and not args.overwrite:
    raise UsageError(f'--out {args.out}: the file exists; pick another path, '
                     'or add --overwrite to replace it')
  cfg = _load_run_config_to_read(rd.config, f'--run {args.run}')
  program = _program('train-ail' if isinstance(
      cfg, config_lib.AILTrainConfig) else 'train')
  latest = checkpointing.latest(rd.learner_checkpoints)
  if latest is None:
    raise UsageError(f'--run {args.run}: no learner checkpoint in '
                     f'{rd.learner_checkpoints}')
  try:
    state = checkpointing.restore_tree(latest, program.learner_template(cfg))
  except checkpointing.CheckpointError as e:
    raise UsageError(f'--run {args.run}: {e}') from e
  demos = demonstrations.collect(cfg.env, program.policy_of(cfg, state),
                                 cfg.mpo, episodes=args.episodes,
                                 seed=args.seed)
  env = environments.make_environment(cfg.env, seed=0)
  keys = demonstrations.observation_keys(env)
  env.close()
  demonstrations.save(args.out, demos, keys)
  loaded = demonstrations.load_for_environment(args.out, cfg.env)
  returns = loaded.episode_returns
  print(f'{args.out}: {loaded.num_episodes} episodes, '
        f'{loaded.num_transitions} transitions from {latest}\n'
        f'return mean {returns.mean():.2f} min {returns.min():.2f}')
  return EXIT_OK


def plot(args) -> int:
  from tandem.launch import plotting
  try:
    out = plotting.plot_run(args.run_dir, args.out)
  except FileNotFoundError as e:
    raise UsageError(str(e)) from e
  print(out)
  return EXIT_OK


def _add_train_parser(sub, command: str, help_text: str, config_cls,
                      example: str):
  """One training subcommand: the same launch arguments for every program,
  its config class's fields listed in --help."""
  t = sub.add_parser(
      command, help=help_text, formatter_class=argparse.RawTextHelpFormatter,
      epilog='config fields (override any with --path=value; defaults of '
      f'{config_cls.__name__} shown: a named config sets some of them\n'
      'differently, and --config <file.py>:<name> --show_config prints '
      'its values):\n' + config_lib.describe(config_cls()))
  t.add_argument('--config', help=f'<file.py>:<name>, e.g. {example}')
  t.add_argument('--launch', choices=config_lib.LAUNCH_TYPES,
                 default='local_mp')
  t.add_argument('--num_actors', type=int)
  t.add_argument('--name', help='run name (directory under runs_root)')
  t.add_argument('--drop_replay', action='store_true',
                 help='on --resume: start from an empty replay buffer '
                 '(needed to change replay_max_size, replay_min_size, '
                 'samples_per_insert or replay_error_buffer: a restored '
                 'buffer keeps its own); the old buffer is moved aside')
  t.add_argument('--resume', metavar='RUN_DIR',
                 help='continue the run in RUN_DIR from its last checkpoint')
  t.add_argument('--show_config', action='store_true',
                 help='print every field of the config this command would '
                 'run (--config or\nthe run\'s config.json, with the '
                 'overrides) and exit; starts and writes nothing')
  return t


def make_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog='tandem', description=__doc__,
                                   formatter_class=argparse.RawTextHelpFormatter)
  sub = parser.add_subparsers(dest='command', required=True)
  _add_train_parser(sub, 'train', 'train MPO with the distributed program',
                    config_lib.TrainConfig, 'configs/mpo.py:cartpole')
  a = _add_train_parser(
      sub, 'train-ail',
      'adversarial imitation (GAIL, AIRL) with an MPO generator',
      config_lib.AILTrainConfig, 'configs/ail.py:gail_cartpole')
  a.add_argument('--demos', help='expert demonstrations (.npz; README: '
                 '"Demonstration files")')
  c = sub.add_parser('collect-demos', help="record a run's mean-action "
                     'policy as a demonstrations file')
  c.add_argument('--run', required=True, help='run directory')
  c.add_argument('--episodes', type=int, required=True)
  c.add_argument('--out', required=True, help='.npz file to write (an '
                 'existing one is refused unless --overwrite)')
  c.add_argument('--overwrite', action='store_true',
                 help='replace an existing --out file')
  c.add_argument('--seed', type=int, default=0)
  p = sub.add_parser('plot', help='write a learning-curve PNG of a run')
  p.add_argument('run_dir')
  p.add_argument('--out', help='PNG path (default: RUN_DIR/learning_curve.png)')
  return parser


# What each command imports beyond pyproject's dependencies, which cover the
# learner core alone (an accelerator image benchmarks it without the rest).
# collect-demos builds the program's learner template, so it imports what
# a launch does.
_PROGRAM_STACK = ('jax', 'optax', 'tensorflow', 'launchpad', 'reverb', 'acme',
                  'dm_control')
STACK = {'train': _PROGRAM_STACK, 'train-ail': _PROGRAM_STACK,
         'collect-demos': _PROGRAM_STACK, 'plot': ('matplotlib',)}


def check_stack(command: str) -> None:
  """A UsageError naming the packages `command` needs that this interpreter
  lacks (a `pip install .` without requirements.lock, or a Python other
  than 3.10, for which dm-launchpad has no wheels), before any of them is
  imported: not a ModuleNotFoundError from deep inside a launch."""
  missing = [m for m in STACK.get(command, ())
             if importlib.util.find_spec(m) is None]
  if missing:
    v = sys.version_info
    raise UsageError(
        f'`tandem {command}` needs {", ".join(missing)}, not installed for '
        f'{sys.executable} (Python {v.major}.{v.minor}); install the pinned '
        'stack with CPython 3.10: `make venv` (README), or `pip install -r '
        'requirements.lock` in a 3.10 environment.')


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = make_parser()
  args, extra = parser.parse_known_args(argv)
  try:
    if not getattr(args, 'show_config', False):  # which reads configs only
      check_stack(args.command)
    if args.command in ('train', 'train-ail'):
      return train(args, extra, args.command)
    if extra:
      parser.error(f'unrecognized arguments: {extra}')
    if args.command == 'collect-demos':
      return collect_demos(args)
    return plot(args)
  except (UsageError, ConfigError) as e:
    print(f'tandem: error: {e}', file=sys.stderr)
    return EXIT_BAD_INPUT
  except Exception as e:  # noqa: BLE001 - known bad-input errors below
    from tandem.agents.runtime.rundir import RunDirLocked
    if isinstance(e, RunDirLocked):
      print(f'tandem: error: {e}', file=sys.stderr)
      return EXIT_BAD_INPUT
    raise


if __name__ == '__main__':
  sys.exit(main())
