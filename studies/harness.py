"""The shared harness of the multi-run studies (studies/dual_study.py,
studies/ail_learning.py). A study is a grid of cells, one `tandem` run per
(variant, seed), each in RUNS_ROOT/<variant>_s<seed>; this module holds all
that does not depend on what the study asks:

- the command line: its types, and refusals (`Refusal`) that end a study
  tool with one line naming the file, run or flag, and exit status 2;
- reading a run directory: its evaluation curve, its learner's columns,
  the code it ran, an adversarial run's learner checkpoint (for the
  diagnostics in studies/);
- committed records. Run directories live under runs/, which git ignores:
  they are gone on the next machine, and with them hours of finished cells.
  So each finished cell is also written, small and deterministic, to a
  records directory inside the repo (studies/results/<study>/<cell>.json),
  which is committed; a study skips a recorded cell and summarises it where
  no run directory is. A record holds the parts the figures are computed
  from, never the figures alone, so a change of the statistics recomputes
  them;
- the grid's plan (each cell finished, to resume, to start, to extend or
  refused) and running it one cell at a time, resumable;
- statistics over seeds: medians, spreads, env steps to a threshold, area
  under the curve, paired differences over the seeds two variants share;
- reports: Markdown tables, CSV and PNGs of median curves.

A study declares the rest: its variants and what each runs, which parts a
cell's run directory yields (`Study`), its thresholds and its report.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import ctypes
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from typing import Callable, NamedTuple, Optional

from tandem.agents.core.fields import ConfigError
from tandem.launch import compare
from tandem.launch import config as config_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXIT_INTERRUPTED = 130
# prctl(2)'s option: the signal the kernel sends a process when its parent
# dies (Linux).
PR_SET_PDEATHSIG = 1
# A cell's run directory and record: <variant>_s<seed>. Variant names may
# hold underscores; the seed is the last _s<digits>.
RUN_NAME = re.compile(r'^(.+)_s(\d+)$')


# ----------------------------------------------------------- command line


def parse_seeds(text: str) -> list:
  """argparse type: '0,1,2' -> [0, 1, 2] (distinct, in order, each >= 0)."""
  try:
    seeds = [int(s) for s in text.split(',') if s.strip()]
  except ValueError:
    seeds = []
  if not seeds or any(s < 0 for s in seeds):
    raise argparse.ArgumentTypeError(
        f'expected comma-separated integers >= 0, got {text!r}')
  return list(dict.fromkeys(seeds))


def parse_budget(text: str) -> int:
  """argparse type: an env-step budget, an integer >= 1."""
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError(f'expected an integer >= 1, got {text!r}')
  return value


def names_type(choices) -> Callable:
  """An argparse type: a comma-separated subset of `choices` -> the names
  in the order given, without repeats."""
  def parse(text: str) -> list:
    names = [n.strip() for n in text.split(',') if n.strip()]
    if not names or any(n not in choices for n in names):
      raise argparse.ArgumentTypeError(
          f'expected a comma-separated subset of {",".join(choices)}, got '
          f'{text!r}')
    return list(dict.fromkeys(names))
  return parse


class Refusal(Exception):
  """Input a study tool will not take (a missing or malformed file, a run
  of another kind, a bad flag); the message names it. `run_tool` prints the
  message and exits 2, argparse's status for bad usage."""


def run_tool(main: Callable[[], Optional[int]]) -> None:
  """A study tool's entry point: exits with main's status, or prints a
  refusal's one line and exits 2."""
  try:
    status = main()
  except Refusal as e:
    print(e, file=sys.stderr)
    status = 2
  sys.exit(status)


@contextlib.contextmanager
def paths_named(prog: str):
  """An OSError naming a path (an unwritable runs_root, records_dir or
  --png) becomes a refusal naming it; any other keeps its traceback."""
  try:
    yield
  except OSError as e:
    if not e.filename:
      raise
    raise Refusal(f'{prog}: {e.filename}: {e.strerror or e}') from e


# -------------------------------------------------------- run directories


def cell_name(variant: str, seed: int) -> str:
  """The cell's run directory and record name."""
  return f'{variant}_s{seed}'


def finite(v):
  """v as a float where it is a finite number, else None."""
  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(
      v):
    return float(v)
  return None


def parse_number(text):
  """A CSV cell as a finite float, else None (blank, nan, torn)."""
  try:
    return finite(float(text))
  except (TypeError, ValueError):
    return None


def read_json(path: str):
  """The parsed file, or None where it is absent or unreadable."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def find_runs(runs_root: str, variants, seeds=None) -> list:
  """[(variant, seed, run_dir)] for each RUNS_ROOT/<variant>_s<seed>,
  ordered as `variants`, then by seed; seeds=None takes every seed found."""
  found = []
  if os.path.isdir(runs_root):
    for entry in os.listdir(runs_root):
      m = RUN_NAME.match(entry)
      path = os.path.join(runs_root, entry)
      if (m and m.group(1) in variants and os.path.isdir(path) and
          (seeds is None or int(m.group(2)) in seeds)):
        found.append((m.group(1), int(m.group(2)), path))
  order = {v: i for i, v in enumerate(variants)}
  return sorted(found, key=lambda c: (order[c[0]], c[1]))


def read_evaluations(run_dir: str, columns=()) -> list:
  """The rows of logs/evaluator.csv in env-step order, each {'env_steps':
  int, 'eval_return': float} and each of `columns` (a finite float or
  None). A row without both is skipped: the torn last line of a run that is
  being written."""
  path = os.path.join(run_dir, 'logs', 'evaluator.csv')
  out = []
  if os.path.isfile(path):
    with open(path, newline='') as f:
      for row in csv.DictReader(f):
        steps = parse_number(row.get('env_steps'))
        ret = parse_number(row.get('eval_return'))
        if steps is not None and ret is not None:
          out.append(dict({c: parse_number(row.get(c)) for c in columns},
                          env_steps=int(steps), eval_return=ret))
  # Rows are appended in time order, restarts included; the global counts
  # order them. Stable: a periodic row stays before the final row of the
  # same count.
  out.sort(key=lambda r: r['env_steps'])
  return out


def read_learner_columns(run_dir: str, columns) -> dict:
  """{column: [(env_steps or None, value), ...]} of logs/learner.csv, the
  rows in file order where the column holds a finite number. Streamed,
  parsing only these columns: a long run logs one row per learner step."""
  path = os.path.join(run_dir, 'logs', 'learner.csv')
  out = {c: [] for c in columns}
  if os.path.isfile(path):
    with open(path, newline='') as f:
      for row in csv.DictReader(f):
        steps = parse_number(row.get('env_steps'))
        for c in columns:
          v = parse_number(row.get(c))
          if v is not None:
            out[c].append((None if steps is None else int(steps), v))
  return out


def read_code(run_dir: str) -> list:
  """The git commits the run's launches ran (config_history.jsonl), in
  order and without repeats, '<commit>+dirty' where tracked files differed;
  [] where none was recorded."""
  out = []
  try:
    with open(os.path.join(run_dir, 'config_history.jsonl')) as f:
      lines = f.read().splitlines()
  except OSError:
    return out
  for line in lines:
    try:
      code = json.loads(line).get('code') or {}
      commit = code.get('commit')
    except (ValueError, AttributeError):
      continue
    if isinstance(commit, str):
      name = commit[:12] + ('+dirty' if code.get('dirty') else '')
      if name not in out:
        out.append(name)
  return out


def restore_ail_run(run_dir: str, checkpoint: Optional[str],
                    refuse: Callable) -> tuple:
  """(config, checkpoint path, the counts it records, the learner state in
  it) of a `tandem train-ail` run: `checkpoint`, else the run's latest
  learner checkpoint. Refuses naming the run where its config.json is
  unreadable or invalid, where refuse(config) gives a reason the caller
  cannot read it, or where it has no checkpoint (or `checkpoint` is no
  file)."""
  from tandem.agents.ail import learner as ail_learner
  from tandem.agents.core import checkpointing
  from tandem.launch import ail as launch_ail
  recorded = read_json(os.path.join(run_dir, 'config.json'))
  if not isinstance(recorded, dict):
    raise Refusal(f'{run_dir}: no readable config.json; expected the '
                  'directory of a `tandem train-ail` run')
  try:
    tc = config_lib.from_dict(recorded)
  except (ConfigError, TypeError, ValueError) as e:
    raise Refusal(f'{run_dir}: config.json: {e}') from None
  reason = refuse(tc)
  if reason:
    raise Refusal(f'{run_dir}: {reason}')
  if checkpoint is None:
    checkpoint = checkpointing.latest(
        os.path.join(run_dir, 'checkpoints', 'learner'))
    if checkpoint is None:
      raise Refusal(f'{run_dir}: no learner checkpoint')
  elif not os.path.isfile(checkpoint):
    raise Refusal(f'--checkpoint {checkpoint}: no such file')
  counts = checkpointing.read_metadata(checkpoint).get('counts', {})
  state = ail_learner.restore(checkpoint, launch_ail.learner_template(tc))
  return tc, checkpoint, counts, state


def run_demos(run_dir: str) -> str:
  """The demonstrations file a `tandem train-ail` run trained on, as its
  demos.json records it; refuses naming the run where that is not there."""
  record = read_json(os.path.join(run_dir, 'demos.json'))
  path = record.get('path') if isinstance(record, dict) else None
  if not isinstance(path, str):
    raise Refusal(f'{run_dir}: demos.json names no demonstrations file; '
                  'give one with --demos')
  if not os.path.isfile(path):
    raise Refusal(f'{run_dir}: its demonstrations, {path}, are not here; '
                  'give the file with --demos')
  return path


def load_run_demos(run_dir: str, path: Optional[str], env: str):
  """The demonstrations at `path`, else those the run trained on, loaded for
  its task `env`; refuses naming the run and the file where they do not
  fit."""
  from tandem.agents.ail import demonstrations
  from tandem.agents.ail.demo_format import DemoError
  try:
    return demonstrations.load_for_environment(path or run_demos(run_dir),
                                               env)
  except DemoError as e:
    raise Refusal(f'{run_dir}: {e}') from None


def thin(points: list, limit: int) -> list:
  """At most `limit` evenly spaced points, the last one kept."""
  if len(points) <= limit:
    return points
  stride = math.ceil(len(points) / limit)
  return points[::stride] + ([points[-1]] if (len(points) - 1) % stride
                             else [])


# ---------------------------------------------- variants as config overrides

# Fields a run's config.json may hold with other values than the study's
# and still be the study's cell: its name and location, the budget (checked
# on its own, from final.json) and plumbing that changes neither learning
# nor what is measured. Every other field is compared, resumable or not:
# actors, replay sizes, refresh and evaluation periods, final evaluation
# episodes and fault injection all change the learning or the figures.
PLUMBING = frozenset({
    'checkpoint_period_s', 'checkpoints_to_keep', 'learner_log_every',
    'tensorboard', 'stop_grace_s', 'replay_checkpoints',
    'replay_checkpoint_period_s', 'max_consecutive_env_faults',
    'stall_window', 'max_skipped_fraction'})
NOT_COMPARED = frozenset({'name', 'runs_root', 'env_step_budget'}) | PLUMBING


def resolve_config_spec(spec: str, prog: str, example: str) -> str:
  """'<file.py>:<name>' with the file made absolute: cells run from the repo
  root, so a path relative to the caller's directory must not change."""
  path, sep, name = spec.partition(':')
  if not sep or not name:
    raise Refusal(f"{prog}: --config {spec!r}: expected "
                  "'<file.py>:<name>', e.g. " + example)
  if not os.path.isabs(path) and not os.path.isfile(path):
    path = os.path.join(REPO_ROOT, path)  # a default is repo-relative
  return f'{os.path.abspath(path)}:{name}'


def load_named_config(spec: str, prog: str):
  """The named TrainConfig a study's cells start from."""
  from tandem.launch import errors
  from tandem.launch import resolve
  try:
    return resolve.load_named_config(spec)
  except errors.UsageError as e:
    raise Refusal(f'{prog}: {e}') from e


def config_mismatches(recorded, expected) -> list:
  """'field: got X, expected Y' for every field of a run's config.json
  (None where unreadable) that defines the run and differs from `expected`,
  the config the study launches for the cell; [] when it is the cell."""
  if recorded is None:
    return ['no readable config.json']
  try:
    got = config_lib.leaf_fields(config_lib.from_dict(recorded))
  except (ConfigError, TypeError, AttributeError, ValueError) as e:
    return [f'config.json is not a valid config ({e})']
  want = config_lib.leaf_fields(expected)
  return [f'{path}: got {got.get(path)!r}, expected {want.get(path)!r}'
          for path in sorted(set(got) | set(want))
          if path not in NOT_COMPARED and got.get(path) != want.get(path)]


# ---------------------------------------------------------------- records


class RecordError(ValueError):
  """A record file that cannot be read as the cell it is named for."""


def write_record(path: str, record: dict) -> None:
  """Written whole or not at all (a crash mid-write leaves the old file)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w') as f:
    json.dump(record, f, indent=1, sort_keys=True)
    f.write('\n')
  os.replace(tmp, path)


def store_record(path: str, record: dict, label: str, origin: str,
                 older_form=None) -> bool:
  """Writes the record unless the file already holds another run of the
  cell (two machines ran it): that one is kept, never overwritten, and a
  warning names both (`origin`: where this record's run lives). True where
  the file now holds this record. `older_form(old, record)`, where given,
  tells a record of this same run written before the study kept some field
  (brought up to date) from another run's."""
  if os.path.exists(path):
    old = read_json(path)  # unreadable: this record replaces it
    if old == json.loads(json.dumps(record)):
      return True
    if old is not None and not (older_form and older_form(old, record)):
      print(f'{label}: {path} records another run of this cell than '
            f'{origin}; kept it (delete it to record the run directory '
            'instead)', file=sys.stderr)
      return False
  write_record(path, record)
  return True


def record_path(records_dir: str, variant: str, seed: int) -> str:
  """RECORDS_DIR/<variant>_s<seed>.json: the file find_records lists."""
  return os.path.join(records_dir, f'{cell_name(variant, seed)}.json')


def find_records(records_dir, variants, seeds=None) -> list:
  """[(variant, seed, path)] for RECORDS_DIR/<variant>_s<seed>.json;
  seeds=None takes every seed found."""
  found = []
  if records_dir and os.path.isdir(records_dir):
    for entry in os.listdir(records_dir):
      stem, ext = os.path.splitext(entry)
      m = RUN_NAME.match(stem)
      if (ext == '.json' and m and m.group(1) in variants and
          (seeds is None or int(m.group(2)) in seeds)):
        found.append((m.group(1), int(m.group(2)),
                      os.path.join(records_dir, entry)))
  return found


def load_record(path: str, record_format: str, role: str, variant: str,
                seed: int) -> dict:
  """A record's JSON, after checking its format and that it is the cell
  (`role` variant, seed) asked for; RecordError naming the file and what is
  wrong otherwise. The study checks the rest of its fields."""
  try:
    with open(path) as f:
      rec = json.load(f)
  except (OSError, ValueError) as e:
    raise RecordError(f'{path}: not a readable JSON record ({e})') from e
  if not isinstance(rec, dict) or rec.get('format') != record_format:
    raise RecordError(f'{path}: expected a record with format '
                      f'{record_format!r}')
  if (rec.get(role), rec.get('seed')) != (variant, seed):
    raise RecordError(f'{path}: records {rec.get(role)!r} seed '
                      f'{rec.get("seed")!r}, expected {variant!r} seed {seed}')
  return rec


# ------------------------------------------------------------------ study


class Found(NamedTuple):
  """One cell of a grid as found: `parts` is the study's parts dict (its
  'final' None where unfinished), or the RecordError of a record that
  cannot be read; `source` the run directory or record it came from."""
  variant: str
  seed: int
  source: str
  parts: object
  recorded: bool  # source is a committed record


class Study(NamedTuple):
  """What the harness needs of a study to find, plan, run and record its
  cells. A cell's parts are a dict of what its figures are computed from,
  'final' (final.json, None until the run finished) and 'config'
  (config.json) among them; its record is the parts with the format and
  the cell's name, so a record reads back as the same parts."""
  name: str             # its messages: 'dual_study'
  role: str             # what its variants are called in records
  record_format: str    # a record's 'format'
  subcommand: str       # the `tandem` command that trains a cell
  read_run: Callable    # run_dir -> parts
  parts_of_record: Callable  # record -> parts; KeyError, TypeError or
                             # ValueError where malformed
  # Refuse to continue an interrupted run whose config is not the cell's
  # (else continue it with a warning).
  strict: bool = True
  older_form: Callable | None = None  # see store_record

  def command(self, *args) -> list:
    """`tandem <subcommand> ARGS`, run with this interpreter."""
    return [sys.executable, '-m', 'tandem.launch.cli', self.subcommand,
            *args]

  def record(self, variant: str, seed: int, parts: dict) -> dict:
    """A finished cell's record (JSON-ready)."""
    return dict(parts, format=self.record_format, seed=seed,
                **{self.role: variant})

  def read_record(self, path: str, variant: str, seed: int) -> dict:
    """A record's parts; RecordError naming the file and what is wrong
    where it is not a finished cell of this variant and seed."""
    rec = load_record(path, self.record_format, self.role, variant, seed)
    try:
      return self.parts_of_record(rec)
    except (KeyError, TypeError, ValueError) as e:
      raise RecordError(f'{path}: malformed record ({e!r})') from e

  def store(self, records_dir: str, variant: str, seed: int, parts: dict,
            origin: str) -> tuple:
    """(path, stored): records a finished cell read from `origin`, its run
    directory (never over another run's record)."""
    path = record_path(records_dir, variant, seed)
    return path, store_record(path, self.record(variant, seed, parts),
                              self.name, origin, self.older_form)

  def collect(self, runs_root: str, records_dir, variants,
              seeds=None) -> list:
    """[Found] for every cell found, in study order. A finished run
    directory wins over the cell's record (it is the fuller); a record wins
    over an unfinished run directory (the cell finished elsewhere), which
    is then not read at all."""
    runs = {(v, n): d for v, n, d in find_runs(runs_root, variants, seeds)}
    recs = {(v, n): p for v, n, p in find_records(records_dir, variants,
                                                  seeds)}
    order = {v: i for i, v in enumerate(variants)}
    out = []
    for key in sorted(set(runs) | set(recs),
                      key=lambda k: (order[k[0]], k[1])):
      run_dir, path = runs.get(key), recs.get(key)
      if run_dir is not None and (path is None or os.path.isfile(
          os.path.join(run_dir, 'final.json'))):
        parts = self.read_run(run_dir)
        if parts['final'] is not None or path is None:
          out.append(Found(*key, run_dir, parts, False))
          continue
      out.append(self.found_record(*key, path))
    return out

  def found_record(self, variant: str, seed: int, path: str) -> Found:
    """A recorded cell as found: its parts, or the RecordError saying why
    they cannot be read."""
    try:
      parts = self.read_record(path, variant, seed)
    except RecordError as e:
      parts = e
    return Found(variant, seed, path, parts, True)


# ------------------------------------------------------------ the grid


def plan_cell(study: Study, runs_root: str, records_dir, variant: str,
              seed: int, budget: int, start: list, problems: Callable,
              extend_from: Optional[str] = None):
  """(action, command, note) for one cell. action: 'skip' (finished, in
  its run directory or in its record under records_dir), 'resume'
  (interrupted), 'start' (new, with the command `start`), 'extend' (with
  `extend_from`, another runs root: the cell's run finished there at a
  smaller budget, to be copied here by run_grid and resumed to `budget`)
  or 'refuse' (its record is unreadable; for a strict study, its
  interrupted run is not the cell; with `extend_from`, there is no run
  there to extend); command is None unless the cell is to be run.
  `problems(config)`: why a config.json (None where unreadable) is not the
  cell's, [] where it is."""
  run_dir = os.path.join(runs_root, cell_name(variant, seed))
  config_path = os.path.join(run_dir, 'config.json')
  resume = study.command('--resume', run_dir, f'--env_step_budget={budget}')
  if os.path.isfile(os.path.join(run_dir, 'final.json')):
    final = read_json(os.path.join(run_dir, 'final.json')) or {}
    note = _finished_note('finished', final.get('budget'), budget,
                          problems(read_json(config_path)), study.role)
    if note != 'finished':
      note += '; delete the run directory to redo it'
    return 'skip', None, note
  record = record_path(records_dir, variant, seed) if records_dir else None
  if record is not None and os.path.exists(record):
    # Finished on another machine: never rerun over it, nor continue an
    # interrupted run directory of it here.
    try:
      parts = study.read_record(record, variant, seed)
    except RecordError as e:
      return 'refuse', None, (f'{e}; restore it (git checkout) or delete it '
                              'to redo the cell')
    head = f'finished (recorded in {record})'
    note = _finished_note(head, parts['final'].get('budget'), budget,
                          problems(parts['config']), study.role)
    if note != head:
      note += '; delete the record to redo it'
    return 'skip', None, note
  if not os.path.isfile(config_path):
    if extend_from is not None:
      return _extension_plan(study, run_dir, extend_from, budget, problems,
                             resume)
    return 'start', start, 'new'
  wrong = problems(read_json(config_path))
  if not wrong:
    return 'resume', resume, 'interrupted; continuing it'
  if study.strict:  # continuing it would add another variant's run
    return 'refuse', None, (f'interrupted, but its config is not this '
                            f'{study.role}\'s (' + '; '.join(wrong) + '); '
                            'delete the run directory to redo it')
  return 'resume', resume, ('interrupted; continuing it (warning: '
                            + '; '.join(wrong) + ')')


def _extension_plan(study: Study, run_dir: str, extend_from: str,
                    budget: int, problems: Callable, resume: list) -> tuple:
  """plan_cell's plan for a cell absent from its runs root, continued from
  the same cell of `extend_from`: 'extend' (with the cell's `resume`
  command, run once the copy is in place) where that run finished below
  `budget` with the cell's config, else 'refuse' naming why (a cell started
  afresh instead would silently be another experiment, hours long)."""
  from tandem.agents.runtime import supervision
  source = os.path.join(extend_from, os.path.basename(run_dir))
  if os.path.exists(run_dir):  # no config.json: not a run to resume
    return 'refuse', None, (f'{run_dir} exists but holds no run '
                            '(config.json); remove it to extend the cell '
                            f'from {source}')
  if not os.path.isfile(os.path.join(source, 'final.json')):
    return 'refuse', None, (f'{source}: no finished run to extend; drop '
                            '--extend_from to start the cell afresh')
  done = (read_json(os.path.join(source, 'final.json')) or {}).get('budget')
  if not isinstance(done, int) or isinstance(done, bool):
    return 'refuse', None, (f'{source}/final.json: no readable budget (an '
                            'integer); cannot tell what the run ran to')
  if done >= budget:
    return 'refuse', None, (f'{source} ran to a budget of {done}, not '
                            f'below {budget}: nothing to extend')
  wrong = problems(read_json(os.path.join(source, 'config.json')))
  if wrong:
    return 'refuse', None, (f'{source} is not this {study.role}\'s run ('
                            + '; '.join(wrong) + ')')
  if supervision.nodes_running(source):  # still writing into it
    return 'refuse', None, (f'{source}: processes of its program are still '
                            'running; wait for them to stop')
  return 'extend', resume, (
      f'finished at a budget of {done} in {source}; copying it here and '
      f'continuing it to {budget}')


def copy_run(source: str, run_dir: str) -> None:
  """Copies the finished run directory `source` (and its log beside it)
  to `run_dir`, which must not exist, as a run to extend: its final.json
  is moved where a resume past the budget moves it (launch/prepare.py's
  archive_final), so the copy reads as interrupted, not finished, until
  its extension finishes (a harness killed before the resume starts
  resumes it next time, and no summary records it at the shorter budget).
  The copy is built under another name and renamed into place once whole,
  so a copy cut short leaves nothing a study would read as the cell;
  `source` is only read."""
  from tandem.agents.runtime.rundir import RunDir
  from tandem.launch import prepare
  if os.path.exists(run_dir):
    raise FileExistsError(f'{run_dir}: already exists; not copying '
                          f'{source} over it')
  log = f'{source}.log'
  if os.path.isfile(log):
    shutil.copyfile(log, f'{run_dir}.log')
  partial = f'{run_dir}.copying'
  shutil.rmtree(partial, ignore_errors=True)  # a copy cut short before
  shutil.copytree(source, partial, symlinks=True)
  copied = RunDir(partial)
  prepare.archive_final(copied, prepare.next_segment(copied))
  os.rename(partial, run_dir)


def _finished_note(note: str, done, budget: int, wrong: list,
                   role: str) -> str:
  """A skipped cell's note, with the budget it ran to where that is not
  the study's and why its config is not the cell's."""
  if done is not None and done != budget:
    note += f'; budget {done}, not {budget}'
  if wrong:
    note += f'; NOT this {role}\'s config (' + '; '.join(wrong) + ')'
  return note


def plan_lines(runs_root: str, plans: list) -> list:
  """--dry_run's text: per (cell name, action, command, note), what it
  would do, with its command and log."""
  out = []
  for i, (name, action, command, note) in enumerate(plans, 1):
    out.append(f'[{i}/{len(plans)}] {name}: {action} ({note})' + (
        '' if command is None else
        f'\n  cd {shlex.quote(REPO_ROOT)} && {shlex.join(command)}\n'
        f'  log: {os.path.join(runs_root, name + ".log")}'))
  return out


def _copy_output(proc, log) -> None:
  """Each line `proc` prints, to the terminal and the cell's log, as it
  comes, until its output ends."""
  for line in proc.stdout:
    sys.stdout.write(line)
    sys.stdout.flush()
    log.write(line)
    log.flush()


def _interrupt_when_parent_dies(parent: int) -> Callable[[], None]:
  """A Popen preexec_fn: the child gets SIGINT from the kernel when the
  harness dies, however it dies (SIGKILL, SIGTERM, a crash), so it stops
  and checkpoints as on Ctrl-C instead of running on to its budget with
  nobody reading it. Where prctl(2) is not there (not Linux), nothing.

  prctl is looked up here, in the parent: the child of a multithreaded
  process (JAX's threads, where it is loaded) may only call what takes no
  lock another thread could have held at the fork, and a lookup (dlopen,
  dlsym) takes the dynamic loader's."""
  try:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
  except (OSError, AttributeError):
    prctl = None

  def arm() -> None:
    if prctl is None:
      return
    prctl(PR_SET_PDEATHSIG, signal.SIGINT)
    if os.getppid() != parent:  # it died before the line above
      os._exit(EXIT_INTERRUPTED)
  return arm


def run_cell(command, log_path: str, cwd: str, label: str) -> int:
  """Runs `command` in `cwd`, streaming its output to the terminal and
  appending it to log_path; returns its exit status (130 if interrupted).

  The run is a session of its own, so a SIGINT reaches it only through
  here, exactly once, whether it came from the terminal (Ctrl-C, to the
  foreground group) or to this process alone (`kill -INT`): it stops its
  program, checkpointing on the way down, and this waits for it, so that
  the next run of the study continues the cell with --resume. A second
  SIGINT kills it. If this process dies, the run gets its SIGINT from the
  kernel."""
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  with open(log_path, 'a') as log:
    log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} "
              f'{shlex.join(command)}\n')
    log.flush()
    proc = subprocess.Popen(command, cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, errors='replace',
                            start_new_session=True,
                            preexec_fn=_interrupt_when_parent_dies(os.getpid()))
    try:
      _copy_output(proc, log)
      return proc.wait()
    except KeyboardInterrupt:
      print(f'\n{label}: interrupted; waiting for the run to stop',
            file=sys.stderr)
      proc.send_signal(signal.SIGINT)
      try:
        _copy_output(proc, log)  # its stop report, to the end
        proc.wait()
      except KeyboardInterrupt:
        proc.kill()
        proc.wait()
      log.write('===== interrupted\n')
      return EXIT_INTERRUPTED


def run_grid(study: Study, cells: list, runs_root: str, plan: Callable,
             summarise: Callable, dry_run: bool = False,
             extend_from: Optional[str] = None) -> int:
  """Trains the cells [(variant, seed)] one at a time, in order, each from
  the repo root with its output appended to RUNS_ROOT/<cell>.log, and
  prints the summary so far after each; returns the exit status (130 where
  a cell was interrupted: rerunning continues it). `plan(variant, seed)`
  gives the cell's (action, command, note), asked just before it runs (an
  earlier cell may have taken an hour, and another process may have
  finished this one meanwhile). A cell to 'extend' is first copied from
  `extend_from` (copy_run). `summarise(last)` prints the summary,
  last=True once the grid is through. --dry_run prints the plan only."""
  if dry_run:
    plans = [(cell_name(v, s),) + plan(v, s) for v, s in cells]
    print('\n'.join(plan_lines(runs_root, plans)))
    return 0
  failed, ran_last = [], False
  for i, (variant, seed) in enumerate(cells, 1):
    name = cell_name(variant, seed)
    action, command, note = plan(variant, seed)
    print(f'\n[{i}/{len(cells)}] {name}: {action} ({note})', flush=True)
    ran_last = command is not None
    if command is None:
      if action == 'refuse':
        failed.append(name)
        print(f'{study.name}: {name}: {note}', file=sys.stderr)
      continue
    os.makedirs(runs_root, exist_ok=True)
    if action == 'extend':
      if extend_from is None:
        raise ValueError(f'{name}: an extension needs run_grid\'s '
                         'extend_from')
      copy_run(os.path.join(extend_from, name), os.path.join(runs_root, name))
    log_path = os.path.join(runs_root, f'{name}.log')
    print(f'$ {shlex.join(command)}\n(log: {log_path})', flush=True)
    rc = run_cell(command, log_path, REPO_ROOT, study.name)
    if rc == EXIT_INTERRUPTED:
      print(f'{study.name}: {name} interrupted; rerun the same command to '
            'continue it', file=sys.stderr)
      return EXIT_INTERRUPTED
    if rc != 0:
      failed.append(name)
      print(f'{study.name}: {name} exited with status {rc}; see '
            f'{log_path}. Going on with the other cells.', file=sys.stderr)
    print(f'\n--- summary after {name} ---', flush=True)
    summarise(i == len(cells))
  if not ran_last:  # the summary of where the grid stands, once
    print('\n--- summary ---', flush=True)
    summarise(True)
  if failed:
    print(f'{study.name}: cells not finished: {", ".join(failed)}; rerun to '
          'continue them (a refused cell needs its run directory or record '
          'removed)', file=sys.stderr)
    return 1
  return 0


# ------------------------------------------------------------- statistics


def median(values):
  """The median, None of no values."""
  return statistics.median(values) if values else None


def median_reached(values: list):
  """The median over seeds of a time to a threshold (None: not reached),
  a seed that never reached it counting as infinitely late: the time by
  which half the seeds had reached it; None where half or more never did.
  `tandem compare` computes it (the one definition of the project)."""
  return compare.median_reached(values)


def compare_table(cells_by_variant: dict, reference: Optional[float] = None,
                  reference_name: Optional[str] = None) -> str:
  """`tandem compare`'s table of the study's cells, the variants as groups
  in the dict's order (the first is the paired differences' base):
  {variant: [{'seed', 'run_dir', 'curve': [{'env_steps', 'elapsed_s',
  'eval_return'}]}]} -> Markdown, thresholds as fractions of `reference`
  (None: of the best variant's median final return). Cells without
  evaluations are left out; a missing elapsed_s is NaN, and where no
  evaluation has one the wall-clock columns are left out."""
  import numpy as np
  groups = {}
  for variant, cells in cells_by_variant.items():
    runs = [compare.Run(
        c['run_dir'], variant, c['seed'],
        np.asarray([p['env_steps'] for p in c['curve']], np.float64),
        np.asarray([np.nan if p.get('elapsed_s') is None else p['elapsed_s']
                    for p in c['curve']], np.float64),
        np.asarray([p['eval_return'] for p in c['curve']], np.float64))
        for c in cells if c['curve']]
    if runs:
      groups[variant] = runs
  if not groups:
    return '(no runs)'
  rows, best = compare.group_table(groups, reference)
  timed = any(np.isfinite(r.seconds).any() for runs in groups.values()
              for r in runs)
  names = {} if reference_name is None else {'reference': reference_name}
  return compare.markdown(rows, best, wall_clock=timed, **names)


def spread(values: list) -> dict:
  """Median, min and max of the values that exist, and how many exist."""
  got = [v for v in values if v is not None]
  return {'median': median(got), 'min': min(got) if got else None,
          'max': max(got) if got else None, 'n': len(got)}


def common_budget(finals) -> int | None:
  """The budget most finished cells ran to (a study's when not given);
  finals: the cells' final.json dicts, None where unfinished."""
  budgets = collections.Counter((f or {}).get('budget') for f in finals)
  budgets.pop(None, None)
  return budgets.most_common(1)[0][0] if budgets else None


def best_median(cells_by_variant: dict, key: str):
  """(variant, its median `key`) with the highest median over its counted
  cells; (None, None) before any cell is counted."""
  medians = {v: median([c[key] for c in cells if c['counted'] and
                        c[key] is not None])
             for v, cells in cells_by_variant.items()}
  medians = {v: m for v, m in medians.items() if m is not None}
  if not medians:
    return None, None
  best = max(medians, key=medians.get)
  return best, medians[best]


def pct(fraction: float) -> str:
  """A threshold's name in figures' keys: 0.9 -> '90pct'."""
  return f'{round(fraction * 100)}pct'


def first_reaching(points: list, threshold, value=lambda p: p[1]):
  """The first point whose value is at or above threshold, or None (also
  where threshold is None)."""
  if threshold is None:
    return None
  return next((p for p in points if value(p) >= threshold), None)


def steps_to(curve: list, threshold):
  """The env steps of the first (env_steps, return) evaluation at or above
  threshold, or None."""
  hit = first_reaching(curve, threshold)
  return None if hit is None else hit[0]


def area_under_curve(curve: list, budget: int):
  """Trapezoid area under the evaluation return over env steps, divided by
  the budget: the run's average return. Every run spans [0, budget]:
  evaluations taken past the budget (the final one lands a few steps beyond
  it) count as at the budget, and the first evaluation's return also holds
  from step 0 (it lands at 0-2k env steps, before the learner's first step
  at replay_min_size, so it is the untrained policy's)."""
  if not curve or not budget:
    return None
  if curve[0][0] > 0:
    curve = [(0, curve[0][1])] + list(curve)
  xs = [min(s, budget) for s, _ in curve]
  ys = [r for _, r in curve]
  area = sum((xs[i] - xs[i - 1]) * (ys[i] + ys[i - 1]) / 2
             for i in range(1, len(xs)))
  return area / budget


def paired(cells: list, reference: list, key: str) -> dict:
  """Per-seed differences (cell - reference) of `key` over the seeds that
  both counted: the seeds share everything but the variant, so the
  difference removes the seed's own luck."""
  ref = {c['seed']: c[key] for c in reference
         if c['counted'] and c[key] is not None}
  diffs = {c['seed']: c[key] - ref[c['seed']] for c in cells
           if c['counted'] and c[key] is not None and c['seed'] in ref}
  return {'seeds': sorted(diffs),
          'differences': [diffs[s] for s in sorted(diffs)],
          'median': median(list(diffs.values())),
          'better': sum(d > 0 for d in diffs.values()),
          'worse': sum(d < 0 for d in diffs.values()),
          'ties': sum(d == 0 for d in diffs.values())}


def variant_stats(cells: list, reference: list, keys, reached_keys,
                  paired_keys) -> dict:
  """A variant's statistics over its counted cells: the spread of each of
  `keys`; for each of `reached_keys` (env steps to a threshold, None where
  not reached) the median_reached, how many reached and of how many; and,
  unless it is the reference, the paired differences of `paired_keys`."""
  counted = [c for c in cells if c['counted']]
  out = {'cells': len(cells), 'counted': len(counted),
         'seeds': [c['seed'] for c in counted]}
  for key in keys:
    out[key] = spread([c[key] for c in counted])
  for key in reached_keys:
    values = [c[key] for c in counted]
    out[key] = {'median': median_reached(values),
                'reached': sum(v is not None for v in values),
                'n': len(values)}
  if reference is not cells:
    for key in paired_keys:
      out[f'paired_{key}'] = paired(cells, reference, key)
  return out


# ---------------------------------------------------------------- reports


def num(v, spec: str = '{:.1f}') -> str:
  """A table's number: '–' where there is none."""
  return '–' if v is None else spec.format(v)


def range_text(s: dict, spec: str = '{:.1f}') -> str:
  """A spread as 'median (min–max)'."""
  if s['median'] is None:
    return '–'
  return (f"{spec.format(s['median'])} ({spec.format(s['min'])}–"
          f"{spec.format(s['max'])})")


def reached_text(s: dict) -> str:
  """Env steps to a threshold as 'median (reached/n)'."""
  return f"{num(s['median'], '{:.0f}')} ({s['reached']}/{s['n']})"


def paired_text(p) -> str:
  """A paired difference as '+median (k better, m worse[, t tied])';
  'reference' for the reference itself (p None)."""
  if p is None:
    return 'reference'
  if not p['seeds']:
    return '–'
  return (f"{p['median']:+.1f} ({p['better']} better, {p['worse']} worse"
          + (f", {p['ties']} tied" if p['ties'] else '') + ')')


def md_row(texts) -> str:
  """One line of a Markdown table ('' for an empty cell)."""
  return '|' + '|'.join(f' {t} ' if t else ' ' for t in texts) + '|'


def md_table(columns, rows) -> list:
  """A Markdown table's lines: columns [(title, align, cell)], align 'l'
  or 'r' and cell(row) the row's text in that column ('' for none)."""
  return ([md_row(title for title, _, _ in columns),
           '|' + '|'.join(':---' if align == 'l' else '---:'
                          for _, align, _ in columns) + '|'] +
          [md_row(cell(row) for _, _, cell in columns) for row in rows])


def code_note(cells: list) -> str:
  """Which code the counted cells ran: a table pooling cells of several
  commits (a record keeps its run's) says so rather than pairing them
  silently."""
  runs: dict = {}
  for c in cells:
    if c['counted']:
      key = (' → '.join(c.get('code') or []) or
             'not recorded (records from before commits were kept)')
      runs[key] = runs.get(key, 0) + 1
  if not runs:
    return 'Code: no counted cell.'
  parts = [f'{k} ({n})' for k, n in sorted(runs.items())]
  head = ('Code of the counted cells:' if len(runs) == 1 else
          f'Code of the counted cells: {len(runs)} different versions,')
  return f"{head} {'; '.join(parts)}."


def write_csv(path: str, columns, rows: list) -> None:
  """One line per row (a dict) with `columns`, blank where a value is
  None."""
  with open(path, 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=list(columns))
    w.writeheader()
    for row in rows:
      w.writerow({k: '' if row.get(k) is None else row[k] for k in columns})


def pyplot():
  """matplotlib.pyplot, drawing to files only (no display)."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def quartile_curves(curves: list, grid) -> tuple:
  """(x, q1, median, q3) over curves [[(x, y), ...], ...] at the grid points
  that every curve reaches, as `tandem compare` draws a group: the curves
  end where the shortest ends, never a "median" of the curves left."""
  import numpy as np
  runs = []
  for pts in curves:
    xs = np.array([p[0] for p in pts], dtype=float)
    runs.append(compare.Run(path='', label='', seed=None, steps=xs,
                            seconds=xs,
                            returns=np.array([p[1] for p in pts], float)))
  return compare.curves(runs, 'steps', np.asarray(grid, dtype=float))


def plot_median(ax, grid, curves: list, band: bool = False, **style):
  """Draws the median of curves over grid (`style`: the line's, color
  among them) and, where `band`, their interquartile range shaded in the
  line's colour; both end where the shortest curve ends."""
  x, q1, q2, q3 = quartile_curves(curves, grid)
  (line,) = ax.plot(x, q2, **style)
  if band:
    ax.fill_between(x, q1, q3, color=line.get_color(), alpha=0.2, lw=0)
  return line


def plot_medians(ax, grid, groups, seeds: bool = False, band: bool = False,
                 **style) -> None:
  """One median curve per group [(label, curves)], group i in colour Ci
  (a group without curves keeps its colour and draws nothing); where
  `seeds`, each curve thin beneath its median; where `band`, the
  interquartile range shaded. `style`: the median lines'."""
  for i, (label, curves) in enumerate(groups):
    color = f'C{i}'
    if seeds:
      for c in curves:
        ax.plot([p[0] for p in c], [p[1] for p in c], color=color,
                alpha=0.25, lw=0.7)
    if curves:
      plot_median(ax, grid, curves, band, color=color, label=label, **style)


def save_figure(fig, path: str) -> None:
  """Writes the figure's PNG (its folder made) and closes it."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=100)
  pyplot().close(fig)
