"""`tandem train` and `tandem train-ail`: a launch, step by step."""

from __future__ import annotations

import sys

from tandem.agents.runtime.rundir import RunDir
from tandem.launch import config as config_lib
from tandem.launch import notes
from tandem.launch import prepare
from tandem.launch import programs
from tandem.launch import report
from tandem.launch import resolve
from tandem.launch import supervise
from tandem.launch.cloud import local
from tandem.launch.cloud import vertex
from tandem.launch.errors import EXIT_OK, UsageError


def train(args, extra, command: str = 'train') -> int:
  """Resolves the config, prepares the run directory, launches, supervises
  and reports; returns the exit code. Bad input raises UsageError (or
  ConfigError) before any process starts."""
  # First, so nothing below (imports, checks) can start JAX on an accelerator.
  keep_off_accelerators(args.launch)
  cfg, run_dir, resume = resolve.resolve_train_config(args, extra, command)
  note = notes.schedule_note(cfg)
  if note:  # on stderr: --show_config's stdout is the config alone
    print(note, file=sys.stderr)
  if getattr(args, 'show_config', False):
    # The named configs and a run's config.json differ from the class
    # defaults that --help lists; this shows what a launch would use.
    print(config_lib.describe(cfg))
    return EXIT_OK
  if cfg.cloud.dry_run and args.launch != 'vertex_ai':
    raise UsageError(f'cloud.dry_run: only --launch vertex_ai sends a request '
                     f'to leave out; --launch {args.launch} would run the job')
  program = programs.for_command(command)
  drop_replay = getattr(args, 'drop_replay', False)
  if args.launch == 'vertex_ai':  # prepares the run in the bucket, sends the job
    return vertex.submit(program, cfg, run_dir, resume, drop_replay=drop_replay)
  demos_record = (program.check_demonstrations(cfg, run_dir if resume else None)
                  if program.check_demonstrations else None)
  rd = RunDir(run_dir)
  with prepare.prepared(rd, cfg, program, resume=resume,
                        drop_replay=drop_replay,
                        demos_record=demos_record) as segment:
    if args.launch == 'vertex_local':
      outcome = local.launch(cfg, rd, resume=resume, segment=segment)
    else:
      outcome = supervise.launch(program, cfg, rd, args.launch, resume=resume,
                                 segment=segment)
    return report.conclude(outcome, rd, cfg, program, segment, args.launch)


def keep_off_accelerators(launch: str) -> None:
  """Under every launch but local_mt the launcher's own JAX work (restoring
  the checkpoint to validate a resume) runs on the CPU: JAX would otherwise
  claim most of a GPU's memory in the launcher, before the learner's
  process starts. local_mt runs the learner in this process, so it keeps
  the default. (jax.config, not JAX_PLATFORMS: node processes inherit the
  environment.)"""
  if launch == 'local_mt':
    return
  import jax
  jax.config.update('jax_platforms', 'cpu')
