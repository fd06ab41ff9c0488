"""The `tandem` command line.

  tandem train --config configs/mpo.py:cartpole [--launch local_mp|local_mt]
               [--network private|host] [--num_actors N] [--name NAME]
               [--mpo.duals.num_steps=10 ...]
  tandem train --resume runs/<name> [--env_step_budget=...]
  tandem train --config ... --launch vertex_ai --runs_root /gcs/<bucket>/runs
               --cloud.project P --cloud.region R --cloud.bucket gs://<bucket>
               --cloud.image URI [--cloud.dry_run=true]   (docs/deployment.md)
  tandem train --config ... --launch vertex_local   (the same job, here)
  tandem train-ail --config configs/ail.py:gail_cartpole --demos FILE.npz
               [--launch ...] [--num_actors N] [--name NAME] [--ail.kind=airl ...]
  tandem train-ail --resume runs/<name>
  tandem collect-demos --run runs/<name> --episodes N --out FILE.npz [--seed S]
                      [--overwrite]
  tandem plot runs/<name> [--out PNG]
  tandem compare runs/a_s0 runs/a_s1 runs/b_s0 ... [--by FIELD] [--out PNG]
                 [--reference RETURN]
  tandem render runs/<name> [--checkpoint latest|STEP] [--episodes N]
                [--steps N] [--every K] [--seed S] [--size WxH]
                [--out FILE.gif|FILE.mp4|FILE.png]
                [--beside_expert | --no-beside_expert] [--demos FILE]
                [--expert_episode E]

Everything that can be checked is checked before any process starts: the
config (every field), the environment name, the run directory (not in use,
not silently reused) and, on resume, the checkpoint and counter files.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
from typing import Optional, Sequence

from tandem.agents.core.fields import ConfigError
from tandem.launch import config as config_lib
from tandem.launch import demos
from tandem.launch import network
from tandem.launch import programs
from tandem.launch import train
from tandem.launch.errors import EXIT_BAD_INPUT, EXIT_OK, UsageError


def plot(args) -> int:
  from tandem.launch import plotting
  try:
    out = plotting.plot_run(args.run_dir, args.out)
  except (FileNotFoundError, plotting.PlotError) as e:
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
  t.add_argument('--config', help=f'<file.py>:<name>, e.g. {example}; the '
                 'file is run as Python (also under --show_config): use only '
                 'config files you would run')
  t.add_argument('--launch', choices=config_lib.LAUNCH_TYPES,
                 default='local_mp', help='local_mp (default): a process per '
                 'node; local_mt: threads of one process; vertex_ai: a Vertex '
                 'AI job\n(cloud.* fields); vertex_local: that job\'s replicas '
                 'as process groups here (docs/deployment.md)')
  t.add_argument('--num_actors', type=int)
  t.add_argument('--network', choices=network.CHOICES, default=network.PRIVATE,
                 help="private (default): the run's nodes in a network "
                 'namespace of their own, unreachable from outside it\n'
                 '(docs/security.md); host: on the host network, for tools '
                 'that attach to live nodes')
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
                 'overrides) and exit; starts no node and writes nothing')
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
  m = sub.add_parser('compare', help='learning curves of several runs, '
                     'grouped, median and interquartile band over seeds, '
                     'with a table')
  m.add_argument('run_dirs', nargs='+', metavar='RUN_DIR')
  m.add_argument('--by', help='group by this config field (dotted, e.g. '
                 'mpo.estep_states); default: the run name without its seed '
                 '(_s<N>), as folder/name where that name lies in several '
                 'folders')
  m.add_argument('--out', default='compare.png', help='PNG path (default: '
                 'compare.png)')
  m.add_argument('--reference', type=float,
                 help='thresholds as fractions of this return (an '
                 "expert's mean, say) instead of the best group's median "
                 'final return')
  r = sub.add_parser('render', help="a run's mean-action policy in its "
                     'environment, rendered off-screen: a video (GIF or '
                     'MP4), or a PNG strip of a few frames')
  r.add_argument('run_dir')
  r.add_argument('--checkpoint', default='latest',
                 help="'latest' (default) or a learner step count")
  r.add_argument('--episodes', type=int, default=1)
  r.add_argument('--steps', type=int,
                 help='at most this many env steps per episode')
  r.add_argument('--every', type=int, default=4,
                 help='one frame every this many env steps (default 4)')
  r.add_argument('--seed', type=int, default=0)
  r.add_argument('--out', help='.gif or .mp4 (animated, 25 frames/s) or .png '
                 '(the frames in a row) path (default: '
                 'RUN_DIR/render-<checkpoint>.gif)')
  r.add_argument('--size', metavar='WIDTHxHEIGHT',
                 help="each scene's size in pixels, a caption band of "
                 '24 pixels above it (default: 320x240 for dm_control, '
                 "a gymnasium task's own size; its frames are scaled to "
                 'a given one)')
  r.add_argument('--beside_expert', action=argparse.BooleanOptionalAction,
                 default=None,
                 help="each episode from a demonstration episode's start "
                 "(its seed, not --seed), with the expert's actions replayed "
                 'beside the agent (default for adversarial runs where their '
                 'file is at hand; else the agent alone, saying why)')
  r.add_argument('--demos', help='the demonstrations to show beside the '
                 "agent (default: the run's own; an MPO run needs one)")
  r.add_argument('--expert_episode', type=int, default=None,
                 help='the first demonstration episode shown (0-based, in '
                 'file order; default 0)')
  v = sub.add_parser('replica', help="run this replica's nodes of a Vertex "
                     'AI job (the image\'s entrypoint in every replica; '
                     'CLUSTER_SPEC says which)')
  v.add_argument('--run_dir', required=True, help='the shared run directory '
                 '(its config.json defines the program)')
  v.add_argument('--segment', type=int, required=True,
                 help='which launch of the run this is (1 first)')
  v.add_argument('--resume', action='store_true',
                 help='the nodes restore the run\'s checkpoints')
  return parser


# What each command imports beyond pyproject's dependencies, which cover the
# learner core alone (an accelerator image benchmarks it without the rest).
# collect-demos builds the program's learner template, so it imports what
# a launch does.
_PROGRAM_STACK = ('jax', 'optax', 'tensorflow', 'launchpad', 'reverb', 'acme',
                  'dm_control')


STACK = {'train': _PROGRAM_STACK, 'train-ail': _PROGRAM_STACK,
         'collect-demos': _PROGRAM_STACK, 'render': _PROGRAM_STACK,
         'replica': _PROGRAM_STACK,
         'plot': ('matplotlib',), 'compare': ('matplotlib',)}


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


def _flushed(code: int) -> int:
  """`code`, once what the command printed has reached stdout: a reader
  that went away (`| head`) is met here, inside main's handler, rather than
  in the interpreter's flush at exit."""
  sys.stdout.flush()
  return code


def _stdout_to_devnull() -> None:
  """stdout's file descriptor onto /dev/null: what is still buffered for a
  reader that went away, and anything printed later, goes nowhere instead
  of failing."""
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, sys.stdout.fileno())
  os.close(devnull)


class _DisplayOnly:
  """stdout for a training run, whose printing is a display: once its
  reader goes away (`tandem train | head`), what would have been printed
  goes to /dev/null and the run goes on to its end (its checkpoints, logs
  and progress.json are what it is for), where a BrokenPipeError in
  whichever thread printed next would have stopped it.

  Where it is not a terminal (a file, a pipe, a log collector), a carriage
  return becomes a newline: Launchpad's stop countdown rewrites one line
  in place on a terminal, and would otherwise run its lines together into
  the next one in a log."""

  def __init__(self, stream):
    self._stream = stream
    self._gone = False
    try:
      self._terminal = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
      self._terminal = False

  def write(self, text: str) -> int:
    if not self._terminal and '\r' in text:
      text = text.replace('\r\n', '\n').replace('\r', '\n')
    try:
      return self._stream.write(text)
    except BrokenPipeError:
      self._reader_gone()
      return len(text)

  def flush(self) -> None:
    try:
      self._stream.flush()
    except BrokenPipeError:
      self._reader_gone()

  def _reader_gone(self) -> None:
    if self._gone:
      return
    self._gone = True
    _stdout_to_devnull()
    print('tandem: standard output was closed; the run goes on without a '
          'display (its progress: progress.json in the run directory)',
          file=sys.stderr, flush=True)

  def __getattr__(self, name):
    return getattr(self._stream, name)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = make_parser()
  args, extra = parser.parse_known_args(argv)
  try:
    if not getattr(args, 'show_config', False):  # which reads configs only
      check_stack(args.command)
    if args.command in programs.COMMANDS:
      # The `tandem` command; a vertex_ai launch runs no node here and must
      # reach Vertex AI.
      if argv is None and not args.show_config and args.launch != 'vertex_ai':
        network.isolate(args.network, sys.argv[1:])
      if not args.show_config and args.launch != 'vertex_ai':
        sys.stdout = _DisplayOnly(sys.stdout)  # a run here, not a request
      return train.train(args, extra, args.command)
    if extra:
      parser.error(f'unrecognized arguments: {extra}')
    if args.command == 'collect-demos':
      return _flushed(demos.collect_demos(args))
    if args.command == 'replica':
      from tandem.launch.cloud import replica
      return replica.run(args.run_dir, args.segment, args.resume)
    if args.command == 'render':
      from tandem.launch import render
      return _flushed(render.render_run(args))
    if args.command == 'compare':
      from tandem.launch import compare
      return _flushed(compare.compare(args))
    return _flushed(plot(args))
  except (UsageError, ConfigError) as e:
    print(f'tandem: error: {e}', file=sys.stderr)
    return EXIT_BAD_INPUT
  except BrokenPipeError:
    # The reader went away (`tandem compare ... | head`): nothing more can be
    # shown, and the exit flush must not print a traceback either. 141 is
    # what a shell reports for a process that SIGPIPE ended.
    _stdout_to_devnull()
    return 128 + signal.SIGPIPE
  except Exception as e:  # noqa: BLE001  (known bad-input errors below)
    from tandem.agents.runtime.rundir import RunDirLocked
    if isinstance(e, RunDirLocked):
      print(f'tandem: error: {e}', file=sys.stderr)
      return EXIT_BAD_INPUT
    raise


if __name__ == '__main__':
  sys.exit(main())
