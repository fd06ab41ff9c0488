"""`tandem train --launch vertex_ai`: the run directory prepared in the
bucket, then the CustomJob handed to the cloud launcher environment.

The launcher does everything a local launch does before its nodes start
(validation, the run directory's refusals and lock, resume checks, the
demonstrations, config.json), through the bucket's mount on this machine
(`/gcs/<bucket>`, or cloud.local_mount), so a bad run fails here, named,
before anything is sent or paid for. The request goes to Vertex AI through
`launch/cloud/submit.py`, run by the launcher environment's Python
(`make venv-cloud`): the Google Cloud client libraries need a protobuf that
TensorFlow 2.8 and Reverb 0.7 do not accept, so they live apart.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import shutil
import subprocess
import sys

from tandem.agents.runtime.rundir import RunDir
from tandem.launch import prepare
from tandem.launch import programs
from tandem.launch.cloud import config as cloud_config
from tandem.launch.cloud import request
from tandem.launch.errors import EXIT_FAILED, EXIT_OK, UsageError

# The launcher environment's Python; TANDEM_CLOUD_PYTHON overrides it (an
# install outside a checkout).
ENV_PYTHON = 'TANDEM_CLOUD_PYTHON'
SUBMIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'submit.py')
# submit.py's exit code for a request sent without an answer.
SUBMIT_UNKNOWN = 3


def cloud_python() -> str:
  """The launcher environment's interpreter, or a UsageError saying how to
  make it."""
  path = os.environ.get(ENV_PYTHON) or os.path.join(
      prepare.CODE_ROOT, '.venv-cloud', 'bin', 'python')
  if not os.access(path, os.X_OK):
    raise UsageError(
        f'--launch vertex_ai sends the job with the Google Cloud client '
        f'libraries, which live in an environment of their own: {path} is '
        'missing; build it with `make venv-cloud` (or set '
        f'{ENV_PYTHON} to its python)')
  return path


def cloud_run_dir(cfg) -> str:
  """The run directory as every replica sees it."""
  return posixpath.join(posixpath.normpath(cfg.runs_root), cfg.name)


def gs_uri(cfg, path: str) -> str:
  """gs://<bucket>/<rest> for a path under the bucket's mount."""
  rest = posixpath.relpath(path, cfg.cloud.mount)
  return f'gs://{cfg.cloud.bucket_name}/{rest}'


def submit(program: programs.Program, cfg, run_dir: str, resume: bool, *,
           drop_replay: bool) -> int:
  """Checks, prepares and sends the job (or, with cloud.dry_run, prints the
  request and sends nothing); returns the exit code."""
  cloud_config.require_for_vertex_ai(cfg)
  remote = cloud_run_dir(cfg)
  local = run_dir if resume else cfg.cloud.local_view(remote)
  if resume and posixpath.normpath(run_dir) != posixpath.normpath(
      cfg.cloud.local_view(remote)):
    # The job trains in runs_root/name; a copy elsewhere would be prepared
    # here and trained there.
    raise UsageError(
        f'--resume {run_dir}: the run\'s config.json places it at {remote} '
        f'(runs_root/name), which this machine sees at '
        f'{cfg.cloud.local_view(remote)}; resume it there (or name where the '
        'bucket is mounted with --cloud.local_mount)')
  rd = RunDir(local)
  if cfg.cloud.dry_run:
    if os.path.isdir(local):
      prepare.refuse_to_overwrite(rd, cfg, resume)
    job = request.custom_job(cfg, program.command, remote,
                             segment=prepare.next_segment(rd), resume=resume)
    print(json.dumps({'parent': request.parent(cfg), 'customJob': job}))
    return EXIT_OK
  python = cloud_python()
  root = os.path.dirname(local)
  if not os.path.isdir(root):
    raise UsageError(
        f'runs_root: {cfg.runs_root} is not reachable here at {root}: the '
        f'launcher prepares the run directory through the bucket\'s mount; '
        f'mount {cfg.cloud.bucket} (e.g. `gcsfuse {cfg.cloud.bucket_name} '
        f'{cfg.cloud.mount}`) or name where it is mounted with '
        '--cloud.local_mount')
  checked = cfg
  if getattr(cfg, 'demos', ''):
    checked = dataclasses.replace(cfg, demos=cfg.cloud.local_view(cfg.demos))
  demos_record = (program.check_demonstrations(checked, local if resume
                                               else None)
                  if program.check_demonstrations else None)
  # What the directory held before this launch: a fresh run's job that was
  # surely not created leaves it as it was.
  existed = os.path.isdir(local)
  before = None if resume else (set(os.listdir(local)) if existed else set())
  with prepare.prepared(rd, cfg, program, resume=resume,
                        drop_replay=drop_replay,
                        demos_record=demos_record) as segment:
    pass  # the lock is released once prepared: the job runs without it
  job = request.custom_job(cfg, program.command, remote, segment=segment,
                           resume=resume)
  return send(python, cfg, job, rd, segment, before=before,
              created=not existed)


def _undo(rd: RunDir, before: set, created: bool) -> None:
  """Removes what a fresh launch wrote in its run directory."""
  if created:
    shutil.rmtree(rd.root, ignore_errors=True)
    return
  for name in set(os.listdir(rd.root)) - before:
    path = os.path.join(rd.root, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      os.unlink(path)


def send(python: str, cfg, job: dict, rd: RunDir, segment: int, *,
         before, created: bool) -> int:
  """Hands the request to submit.py; reports the created job. A fresh
  run's job that was surely not created takes back what its launch wrote
  (`before`: the directory's entries before it; None on resume), so the
  same command can be run again."""
  payload = {'api_endpoint': cfg.cloud.endpoint(),
             'parent': request.parent(cfg), 'custom_job': job}
  done = subprocess.run([python, SUBMIT], input=json.dumps(payload),
                        capture_output=True, text=True)
  if done.returncode != 0:
    print(f'tandem: {done.stderr.strip() or "submit.py failed"}',
          file=sys.stderr)
    command = programs.command_of(type(cfg))
    if done.returncode == SUBMIT_UNKNOWN:
      print(f'the run directory {rd.root} is kept as prepared (segment '
            f'{segment}); if no job was created, ' + (
                f'send it again with: tandem {command} --resume {rd.root} '
                '--launch vertex_ai' if before is None else
                'remove what this launch wrote there and run the same '
                'command again'), file=sys.stderr)
    elif before is not None:
      _undo(rd, before, created)
      print(f'nothing was sent; what this launch wrote in {rd.root} is '
            'removed: run the same command again', file=sys.stderr)
    else:
      print(f'nothing was sent; the run (segment {segment} prepared) resumes '
            f'with: tandem {command} --resume {rd.root} --launch vertex_ai',
            file=sys.stderr)
    return EXIT_FAILED
  answer = json.loads(done.stdout.strip().splitlines()[-1])
  record = os.path.join(rd.segment_nodes(segment), 'vertex_job.json')
  os.makedirs(os.path.dirname(record), exist_ok=True)
  from tandem.agents.core import files
  files.write_json_atomic(record, {'job': answer, 'request': payload})
  name = answer['name']
  lines = [f"sent: {name} ({answer.get('state')})",
           f"console: {answer.get('console_url')}",
           f'logs: gcloud ai custom-jobs stream-logs {name}']
  if cfg.tensorboard:
    lines.append('live: tensorboard --logdir '
                 f'{gs_uri(cfg, cloud_run_dir(cfg))}/logs/tb')
  lines += [f'stop: gcloud ai custom-jobs cancel {name} (nodes checkpoint '
            'on the way down)',
            f'continue: tandem {programs.command_of(type(cfg))} --resume '
            f'{rd.root} --launch vertex_ai']
  print('\n'.join(lines))
  return EXIT_OK
