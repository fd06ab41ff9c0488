"""A launch under watch: Launchpad set up for the run directory, the program
launched, its progress shown, its node processes watched, and how it ended
(`Outcome`) handed to the report."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import shutil
import sys
import threading
import time
from typing import Optional

from tandem.launch import programs
from tandem.launch import report


@dataclasses.dataclass(frozen=True)
class Outcome:
  """How a launch ended, as the launcher saw it."""
  interrupted: bool  # Ctrl-C (or SIGINT) in the launcher: it stopped the nodes
  failed: bool       # a node failed, and Launchpad stopped the rest
  # When the stop began (the limiter's lp.stop(), a failure, Ctrl-C), in
  # seconds since the epoch; None where the launcher did not see it.
  stop_time: Optional[float]


def launch(program: programs.Program, cfg, rd, launch_type: str, *,
           resume: bool, segment: int) -> Outcome:
  """Launches `program` for the run directory `rd` and waits until it ends.
  Node logs go to nodes/segment-<k>/."""
  set_up_launchpad(rd, cfg, rd.segment_nodes(segment))
  import launchpad as lp
  from tandem.agents.runtime import supervision
  built = program.build(cfg, rd.root, resume=resume, segment=segment)
  print(f'run directory: {rd.root}\nlaunching {launch_type} with '
        f'{cfg.num_actors} actors; budget {cfg.env_step_budget} env steps'
        f'{tensorboard_hint(cfg, os.path.join(rd.logs, "tb"))}')
  stop_watch = threading.Event()
  watcher = threading.Thread(target=watch_progress,
                             args=(rd.progress, stop_watch), daemon=True)
  if launch_type == 'local_mp':
    manager = lp.launch(built, launch_type='local_mp',
                        terminal='output_to_files',
                        local_resources=program.local_resources('local_mp'))
    # When the grace period runs out, Launchpad SIGKILLs the nodes still
    # stopping and, by default, its own launcher too (exit 137, nothing
    # reported). Every local_mp node is a process, so the launcher can
    # stay alive to say which node was killed and how to continue.
    manager._kill_main_thread = False  # noqa: SLF001  (no public setting)
  else:
    manager = lp.launch(built, launch_type='local_mt')
  watcher.start()
  # Only local_mp has node processes to watch; local_mt's are threads.
  deaths = supervision.DeathWatch(
      rd.root, expected=len(program.node_names(cfg.num_actors)))
  if launch_type == 'local_mp':
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
    return Outcome(interrupted=True, failed=False, stop_time=stop_time)
  except BaseException as e:  # noqa: BLE001  (a node failed; the manager stops the rest)
    failed = True
    stop_time = time.time()
    print(f'\nprogram failed: {report.describe_failure(e)}', file=sys.stderr)
    first = deaths.first(wait_s=2.0)
    if first is not None:
      print(f'the first node process to end was {first[1]} (pid {first[0]})',
            file=sys.stderr)
    try:
      manager.wait(raise_error=False)
    except BaseException:  # noqa: BLE001  (the failure above is the one reported)
      pass
  finally:
    stop_watch.set()
    watcher.join(timeout=5.0)  # its last line end before the report
    deaths.stop()
  return Outcome(interrupted=False, failed=failed,
                 stop_time=stop_seen[0] if stop_seen else stop_time)


def set_up_launchpad(rd, cfg, nodes_dir: str) -> None:
  """Node logs to `nodes_dir` (this launch's segment folder, or a replica's
  folder in it), this process announced to its nodes as their launcher
  (they exit with it), and the stop grace as Launchpad's notice."""
  # Launchpad reads this when its file-output launcher is first imported;
  # each launch writes its node logs to its own segment folder.
  os.environ['LAUNCHPAD_LOGGING_DIR'] = nodes_dir
  # ... but only if that module is not imported yet, and acme imports
  # launchpad (hence it) when our node modules load: set what it read.
  from launchpad.launch.run_locally import launch_local_output_to_files
  launch_local_output_to_files._LOGGING_DIR = nodes_dir  # noqa: SLF001
  from tandem.agents.runtime import supervision
  supervision.announce(rd.root, cfg.stop_grace_s)  # before any node starts
  from absl import flags
  # Read by Launchpad's worker manager when lp.launch creates it.
  flags.FLAGS.lp_termination_notice_secs = int(math.ceil(cfg.stop_grace_s))


def tensorboard_hint(cfg, logdir: str) -> str:
  """The line that tells how to watch the run in TensorBoard (with its
  leading line end), or nothing where the run writes no events."""
  if not cfg.tensorboard:
    return ''
  return (f'\nwatch it live: {tensorboard_command()} --logdir '
          f'{shlex.quote(logdir)}')


def tensorboard_command() -> str:
  """`tensorboard` where the shell finds this environment's; else its path
  beside this Python (the project's .venv/bin, which `make` does not put on
  the PATH)."""
  beside = os.path.join(os.path.dirname(sys.executable), 'tensorboard')
  on_path = shutil.which('tensorboard')
  if not os.path.exists(beside) or (
      on_path and os.path.realpath(on_path) == os.path.realpath(beside)):
    return 'tensorboard'
  relative = os.path.relpath(beside)
  return shlex.quote(beside if relative.startswith('..') else relative)


def progress_line(progress: dict) -> str:
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


def progress_bar(progress: dict, width: int = 24) -> str:
  """'[#########---------------]  37%': the env steps made of the budget."""
  fraction = min(max(progress['counts']['env_steps'] /
                     max(progress['budget'], 1), 0.0), 1.0)
  filled = int(round(fraction * width))
  return f"[{'#' * filled}{'-' * (width - filled)}] {fraction:4.0%}"


def terminal_line(progress: dict, columns: int) -> str:
  """The bar and the status for a terminal `columns` wide, in fewer than
  `columns` characters (a line that wraps cannot be rewritten in place):
  the whole status line where it fits, else a shorter bar with env steps,
  their rate, the last evaluation and the time to the budget, else as much
  of that as fits."""
  bar = progress_bar(progress)
  full = f'{bar} {progress_line(progress)}'
  if len(full) < columns:
    return full
  c = progress['counts']
  ev, eta = progress.get('last_eval_return'), progress.get('eta_s')
  short = (f"{progress_bar(progress, width=10)} "
           f"{c['env_steps']}/{progress['budget']} steps | "
           f"{progress['env_steps_per_s']:.0f} env/s | "
           f"eval {'-' if ev is None else f'{ev:.1f}'} | "
           f"{'-' if eta is None else f'{eta/60:.1f} min'} left")
  return short[:max(columns - 1, 1)]


def watch_progress(path: str, stop: threading.Event, period: float = 5.0):
  """Every `period` s, the run's progress: on a terminal one line with a
  bar, rewritten in place and cut to the terminal's width at each update;
  elsewhere (a log file, a pipe) a plain line."""
  tty = sys.stdout.isatty()
  device_shown = False
  shown = False
  while not stop.wait(period):
    try:
      with open(path) as f:
        progress = json.load(f)
      line = progress_line(progress)
    except (OSError, ValueError, RecursionError, KeyError):
      continue
    if not device_shown and progress.get('learner_device'):
      # On a terminal it takes the bar's line; the bar follows below it.
      print(f"{CLEAR_LINE if shown else ''}learner device: "
            f"{progress['learner_device']}", flush=True)
      device_shown = True
    if tty:
      columns = shutil.get_terminal_size().columns
      print(f'{CLEAR_LINE}{terminal_line(progress, columns)}', end='',
            flush=True)
      shown = True
    else:
      print(line, flush=True)
  if shown:
    print(flush=True)  # what follows starts on a line of its own


CLEAR_LINE = '\r\x1b[K'  # back to the line's start, then erase it
