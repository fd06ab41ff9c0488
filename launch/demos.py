"""Demonstrations at the command line: the file a `train-ail` launch checks
before any process starts (and holds a resume to), the note on terminal
states, and `tandem collect-demos`, which records a run's policy as a file."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Optional

from tandem.launch import resolve
from tandem.launch.errors import EXIT_OK, UsageError, require_writable_dir


def check_for_launch(cfg, run_dir: Optional[str]) -> dict:
  """An adversarial launch's demonstrations, checked (check_demonstrations;
  run_dir: a resume's run directory, else None), with the note on terminal
  states printed; returns the record the run directory keeps (demos.json)."""
  record = check_demonstrations(cfg, run_dir)
  note = terminal_note(record, cfg)
  if note:
    print(note)
  return record


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
  record = _record(cfg.demos, demos)
  path = os.path.join(run_dir, 'demos.json') if run_dir else None
  if path and os.path.isfile(path):
    try:
      with open(path) as f:
        first = json.load(f)
      if not isinstance(first, dict):
        raise ValueError(f'a JSON object expected, got {type(first).__name__}')
    except (OSError, ValueError, RecursionError) as e:
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


def _record(path: str, demos) -> dict:
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return {'path': os.path.abspath(path), 'sha256': digest.hexdigest(),
          'transitions': int(demos.num_transitions),
          'episodes': int(demos.num_episodes),
          'terminal_transitions': int((demos.discount == 0).sum())}


def terminal_note(record: dict, cfg) -> Optional[str]:
  """A warning when absorbing states are off and the expert's episodes
  terminate, or the generator's may (environments.may_terminate, even where
  the expert's never do): without DAC's absorbing states the learned
  reward's sign biases episode length. Where 'auto' turned them on, a line
  saying so."""
  from tandem.agents.envs import environments
  if cfg.ail.absorbing:
    if cfg.ail.absorbing_states == 'on':
      return None
    return (f"note: ail.absorbing_states=auto turns DAC's absorbing states "
            f"on: {cfg.env}'s episodes may end in a terminal state "
            "(--ail.absorbing_states=off to run without them).")
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
  return (f'note: {where}, and ail.absorbing_states is off, so without '
          "DAC's absorbing states (Kostrikov et al. 2019, Sec. 4.2) the "
          f'reward (ail.reward={cfg.ail.reward}) {bias}. '
          '--ail.absorbing_states=on removes the bias; compare '
          'agent_terminal_fraction with expert_terminal_fraction in '
          'logs/discriminator.csv.')


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
  if args.seed < 0 or args.seed + args.episodes > 2**31 - 1:
    raise UsageError(f'--seed: expected an integer >= 0 with --seed + '
                     f'--episodes below 2**31 (episode k runs on seed + k), '
                     f'got {args.seed}')
  # Before the episodes are collected, not after: they can take minutes.
  require_writable_dir(args.out)
  # A demonstrations file may be the only copy of an expert's episodes.
  if os.path.lexists(args.out) and not args.overwrite:
    raise UsageError(f'--out {args.out}: the file exists; pick another path, '
                     'or add --overwrite to replace it')
  cfg = resolve.load_run_config_to_read(rd.config, f'--run {args.run}')
  latest = checkpointing.latest(rd.learner_checkpoints)
  if latest is None:
    raise UsageError(f'--run {args.run}: no learner checkpoint in '
                     f'{rd.learner_checkpoints}')
  program, state = resolve.restore_learner_state(cfg, latest,
                                                 f'--run {args.run}')
  demos = demonstrations.collect(cfg.env, program.policy_of(cfg, state),
                                 cfg.mpo, episodes=args.episodes,
                                 seed=args.seed)
  env = environments.make_environment(cfg.env, seed=0)
  keys = demonstrations.observation_keys(env)
  env.close()
  try:
    demonstrations.save(args.out, demos, keys)
  except OSError as e:
    raise UsageError(f'--out {args.out}: cannot write it ({e.strerror or e}); '
                     'nothing was written there') from e
  loaded = demonstrations.load_for_environment(args.out, cfg.env)
  returns = loaded.episode_returns
  print(f'{args.out}: {loaded.num_episodes} episodes, '
        f'{loaded.num_transitions} transitions from {latest}\n'
        f'return mean {returns.mean():.2f} min {returns.min():.2f}')
  return EXIT_OK
