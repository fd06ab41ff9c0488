"""What keeping the replay buffer across a stop costs, and what it buys.

    python bench/resume.py [--sizes 100000 1000000] [--layouts cartpole]
                           [--repeats 3] [--budget 3000] [--extra_steps 1500]

Three measurements, run one after another (on a 2-core machine nothing here
should overlap with anything else):

1. Replay checkpoint cost. An in-process Reverb server holds the table that
   `layouts.make_table` builds for the run's layout (cartpole: observation 5,
   action 1, as configs/mpo.py:make_run; `--layouts cartpole walker` adds
   walker's 24/6), with Reverb's DefaultCheckpointer in a temporary folder,
   as the replay node has it. N transitions are inserted as actors write
   them (one row and one item per step, chunks of 16 rows) but flushed every
   1000 steps; the insert time is reported on its own. Then
   `client.checkpoint()` is timed (median of --repeats), with the size of
   the checkpoint it wrote; and a restore: the server is stopped, a new one
   is started on the same checkpoint folder, and the time until
   `server_info()` shows N items is taken. The table's rate limiter is the
   make_run one (min size 1000, samples per insert 48) with an error buffer
   wide enough to let N inserts through without a sampler. One more,
   untimed checkpoint runs while a thread writes one item and flushes, over
   and over, as an actor does: the longest write during it says whether a
   periodic checkpoint stalls the actors.
2. Time from `--resume` to the first learner update, with and without the
   buffer. configs/mpo.py:tiny runs once to --budget env steps (local_mp);
   its run directory is copied twice; copy A resumes normally (the buffer is
   restored) and copy B with --drop_replay, each to the first run's final
   env steps + --extra_steps. For each: seconds from the resume's line in
   config_history.jsonl to the wall_time of the first learner.csv row past
   the learner checkpoint the resume started from, the items the replay
   node restored (replay_restored.json), and the env steps the actors added
   before that first update.
3. The longest stop per node: the maximum of seconds_to_stop over the three
   launches' nodes/segment-<k>/stop_times.json, and any node killed.

Ends with one JSON line. Temporary folders are removed at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _checkout import REPO_ROOT  # binds `tandem` to this checkout

import _timing  # (bench/_timing.py: machine info; imports jax)
import numpy as np

from tandem.agents.core import checkpointing
from tandem.agents.runtime import logs
from tandem.agents.replay import layouts
LAYOUTS = {'cartpole': ('cartpole_swingup', layouts.TransitionLayout(5, 1)),
           'walker': ('walker_walk', layouts.TransitionLayout(24, 6))}
# configs/mpo.py:make_run's table (launch/config.py defaults besides).
MAX_SIZE, MIN_SIZE, SAMPLES_PER_INSERT = 1_000_000, 1_000, 48.0
CHUNK_LENGTH = 16       # what the actors' writers use (adders._RowAdder)
FLUSH_EVERY = 1_000
RUN_NAME = 'tiny_resume'
PROBE_ROOM = 10_000_000  # inserts the rate limiter lets through beyond n


def label(n: int) -> str:
  if n % 1_000_000 == 0:
    return f'{n // 1_000_000}m'
  if n % 1_000 == 0:
    return f'{n // 1_000}k'
  return str(n)


def dir_bytes(path: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f))
             for d, _, names in os.walk(path) for f in names)


def rss_mb() -> float:
  with open('/proc/self/statm') as f:
    return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20


# --------------------------------------------------------------------------
# 1. Checkpoint cost.

def _server(layout, n: int, path: str):
  import reverb
  table = layouts.make_table(
      layout, max_size=max(MAX_SIZE, n), min_size=MIN_SIZE,
      samples_per_insert=SAMPLES_PER_INSERT,
      # Room for n inserts and the stall probe's, with no sampler.
      error_buffer=float((n + PROBE_ROOM) * SAMPLES_PER_INSERT))
  server = reverb.Server(
      tables=[table], port=None,
      checkpointer=reverb.checkpointers.DefaultCheckpointer(path))
  return server, reverb.Client(f'localhost:{server.port}')


def _size(client) -> int:
  return int(client.server_info()[layouts.TABLE].current_size)


def _insert(client, layout, n: int) -> None:
  """n rows, one item each, through the C++ writer as adders._RowWriter
  does; flushed every FLUSH_EVERY rows instead of every 50."""
  from reverb import pybind
  writer = client.trajectory_writer(num_keep_alive_refs=CHUNK_LENGTH)
  cpp = writer._writer  # noqa: SLF001  (as adders._RowWriter)
  cpp.ConfigureChunker(0, pybind.ConstantChunkerOptions(
      max_chunk_length=CHUNK_LENGTH, num_keep_alive_refs=CHUNK_LENGTH))
  rng = np.random.default_rng(0)
  done = 0
  while done < n:
    block = rng.standard_normal(
        (min(FLUSH_EVERY, n - done), layout.width)).astype(np.float32)
    for row in block:
      (ref,) = cpp.Append([row])
      cpp.CreateItem(layouts.TABLE, 1.0, [[ref]], [True])
    writer.flush()
    done += len(block)
  writer.close()


def insert_stall(client, layout) -> dict:
  """One more (untimed) checkpoint while another thread writes one item
  and flushes, over and over, as an actor does: the longest single write
  during the checkpoint, and the median write before it."""
  import threading
  from reverb import pybind
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  cpp = writer._writer  # noqa: SLF001  (as adders._RowWriter)
  cpp.ConfigureChunker(0, pybind.ConstantChunkerOptions(
      max_chunk_length=1, num_keep_alive_refs=1))
  row = np.zeros((layout.width,), np.float32)
  done, writes = threading.Event(), []

  def loop():
    while not done.is_set():
      t = time.perf_counter()
      (ref,) = cpp.Append([row])
      cpp.CreateItem(layouts.TABLE, 1.0, [[ref]], [True])
      writer.flush(timeout_ms=60_000)
      writes.append((t, time.perf_counter()))

  thread = threading.Thread(target=loop, daemon=True)
  thread.start()  # an error in it leaves `writes` short; reported as None
  time.sleep(1.0)
  t0 = time.perf_counter()
  client.checkpoint()
  t1 = time.perf_counter()
  time.sleep(0.2)
  done.set()
  thread.join(70.0)
  writer.close()
  before = [b - a for a, b in writes if b < t0]
  during = [b - a for a, b in writes if b > t0 and a < t1]
  return {'write_s_median': statistics.median(before) if before else None,
          'write_s_max_during_checkpoint': max(during) if during else None,
          'writes_during_checkpoint': len(during),
          'probe_checkpoint_s': t1 - t0}


def checkpoint_cost(layout, n: int, repeats: int, tmp_root: str) -> dict:
  path = tempfile.mkdtemp(prefix='replay-ckpt-', dir=tmp_root)
  try:
    server, client = _server(layout, n, path)
    rss0 = rss_mb()
    t0 = time.perf_counter()
    _insert(client, layout, n)
    insert_s = time.perf_counter() - t0
    assert _size(client) == n, (_size(client), n)
    rss = rss_mb() - rss0
    times, written = [], None
    for _ in range(repeats):
      t0 = time.perf_counter()
      written = client.checkpoint()
      times.append(time.perf_counter() - t0)
    ckpt_bytes = dir_bytes(written)
    folder_bytes = dir_bytes(path)
    stall = insert_stall(client, layout)
    server.stop()
    del client, server
    gc.collect()

    t0 = time.perf_counter()
    server, client = _server(layout, n, path)
    while _size(client) < n:
      time.sleep(0.01)
    restore_s = time.perf_counter() - t0
    server.stop()
    del client, server
    gc.collect()
  finally:
    shutil.rmtree(path, ignore_errors=True)
  return {'insert_s': insert_s, 'checkpoint_s': statistics.median(times),
          'checkpoint_s_all': times, 'bytes': ckpt_bytes,
          'folder_bytes': folder_bytes, 'restore_s': restore_s,
          'rss_mb': rss, **stall}


# --------------------------------------------------------------------------
# 2. Resume to first update; 3. stop times.

def tandem(args: list, timeout: float) -> float:
  env = dict(os.environ)
  env.pop('LAUNCHPAD_LOGGING_DIR', None)
  t0 = time.time()
  proc = subprocess.run([sys.executable, '-m', 'tandem.launch.cli'] + args,
                        cwd=REPO_ROOT, env=env, capture_output=True,
                        text=True, timeout=timeout)
  if proc.returncode != 0:
    raise SystemExit(f'tandem {" ".join(args)} failed ({proc.returncode}):\n'
                     f'{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}')
  return time.time() - t0


def read_json(path: str):
  with open(path) as f:
    return json.load(f)


def last_launch(run_dir: str) -> dict:
  with open(os.path.join(run_dir, 'config_history.jsonl')) as f:
    return [json.loads(line) for line in f if line.strip()][-1]


def resumed(run_dir: str, ckpt_counts: dict, budget: int, drop: bool,
            timeout: float) -> dict:
  wall = tandem(['train', '--resume', run_dir, '--launch', 'local_mp',
                 f'--env_step_budget={budget}'] +
                (['--drop_replay'] if drop else []), timeout)
  launch = last_launch(run_dir)
  rows = logs.read_csv(os.path.join(run_dir, 'logs', 'learner.csv'))
  first = next(r for r in rows
               if r['learner_steps'] > ckpt_counts['learner_steps'])
  restored_path = os.path.join(run_dir, 'checkpoints', 'replay_restored.json')
  restored = read_json(restored_path) if os.path.exists(restored_path) \
      else None
  if restored is not None and restored['time'] < launch['time']:
    restored = None  # the first launch's, not this one's
  at_stop = read_json(os.path.join(run_dir, 'checkpoints',
                                   'replay_checkpoint.json'))
  return {
      'wall_s': wall, 'segment': launch['segment'],
      'to_first_update_s': first['wall_time'] - launch['time'],
      'first_row': {k: first[k] for k in ('learner_steps', 'env_steps')},
      'env_steps_added': int(first['env_steps'] - ckpt_counts['env_steps']),
      'restored_items': (sum(restored['items'].values())
                         if restored else None),
      # The replay server is up (its checkpoint loaded) when it writes this.
      'to_replay_ready_s': (restored['time'] - launch['time']
                            if restored else None),
      'stop_checkpoint': at_stop,
      'stop_times': read_json(os.path.join(
          run_dir, 'nodes', f'segment-{launch["segment"]}',
          'stop_times.json')),
  }


def resume_study(budget: int, extra: int, tmp_root: str,
                 timeout: float) -> dict:
  root = tempfile.mkdtemp(prefix='resume-runs-', dir=tmp_root)
  try:
    base = os.path.join(root, 'base', RUN_NAME)
    wall = tandem(['train', '--config', 'configs/mpo.py:tiny', '--launch',
                   'local_mp', '--runs_root', os.path.dirname(base),
                   '--name', RUN_NAME, f'--env_step_budget={budget}'],
                  timeout)
    first_counts = read_json(os.path.join(base, 'final.json'))['counts']
    latest = checkpointing.latest(os.path.join(base, 'checkpoints',
                                               'learner'))
    ckpt = checkpointing.read_metadata(latest)['counts']
    base_stop = read_json(os.path.join(base, 'checkpoints',
                                       'replay_checkpoint.json'))
    out = {'base': {'wall_s': wall, 'final_counts': first_counts,
                    'checkpoint': os.path.basename(latest),
                    'checkpoint_counts': ckpt,
                    'stop_checkpoint': base_stop,
                    'stop_times': read_json(os.path.join(
                        base, 'nodes', 'segment-1', 'stop_times.json'))}}
    target = int(first_counts['env_steps']) + extra
    for key, drop in (('with_replay', False), ('without_replay', True)):
      run_dir = os.path.join(root, key, RUN_NAME)
      shutil.copytree(base, run_dir, symlinks=True)
      out[key] = resumed(run_dir, ckpt, target, drop, timeout)
    out['target_env_steps'] = target
    return out
  finally:
    shutil.rmtree(root, ignore_errors=True)


def stop_maxima(study: dict) -> tuple[dict, list]:
  worst, killed = {}, []
  for key in ('base', 'with_replay', 'without_replay'):
    st = study[key]['stop_times']
    for node, s in st['seconds_to_stop'].items():
      worst[node] = max(worst.get(node, float('-inf')), s)
    killed += [f'{key}:{n}' for n in st['killed']]
  return worst, killed


# --------------------------------------------------------------------------

def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument('--sizes', type=int, nargs='+',
                 default=[100_000, 1_000_000])
  p.add_argument('--layouts', nargs='+', default=['cartpole'],
                 choices=sorted(LAYOUTS))
  p.add_argument('--repeats', type=int, default=3)
  p.add_argument('--budget', type=int, default=3_000,
                 help='env steps of the first tiny run')
  p.add_argument('--extra_steps', type=int, default=1_500,
                 help='env steps each resume adds')
  p.add_argument('--run_timeout_s', type=float, default=300.0)
  p.add_argument('--skip_checkpoint', action='store_true')
  p.add_argument('--skip_resume', action='store_true')
  args = p.parse_args()

  for line in _timing.environment_lines():
    print(line)
  load0 = os.getloadavg()
  print(f'load avg:    {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} (start)')
  tmp_root = tempfile.mkdtemp(prefix='tandem-bench-resume-')
  out: dict = {}
  try:
    if not args.skip_checkpoint:
      print('\nreplay checkpoint cost (in-process Reverb server, '
            f'chunks of {CHUNK_LENGTH}, median of {args.repeats}):')
      print(f'{"layout":<18}{"width":>6}{"items":>10}{"insert s":>10}'
            f'{"ckpt s":>9}{"ckpt MB":>9}{"B/item":>8}{"restore s":>11}'
            f'{"RSS MB":>8}')
      # Warm-up: the first server in a process loads Reverb's and
      # TensorFlow's libraries; keep that out of the figures.
      checkpoint_cost(LAYOUTS['cartpole'][1], 1_000, 1, tmp_root)
      for name in args.layouts:
        task, layout = LAYOUTS[name]
        prefix = '' if name == 'cartpole' else f'{task}.'
        for n in args.sizes:
          r = checkpoint_cost(layout, n, args.repeats, tmp_root)
          print(f'{task:<18}{layout.width:>6}{n:>10}{r["insert_s"]:>10.1f}'
                f'{r["checkpoint_s"]:>9.2f}{r["bytes"] / 1e6:>9.1f}'
                f'{r["bytes"] / n:>8.0f}{r["restore_s"]:>11.2f}'
                f'{r["rss_mb"]:>8.0f}   (all ckpt s: '
                f'{", ".join(f"{t:.2f}" for t in r["checkpoint_s_all"])}; '
                f'folder after {args.repeats}: '
                f'{r["folder_bytes"] / 1e6:.1f} MB)', flush=True)
          worst, med = (r['write_s_max_during_checkpoint'],
                        r['write_s_median'])
          print(f'{"":<18}an actor-like writer during one more checkpoint '
                f'({r["probe_checkpoint_s"]:.2f} s): '
                f'{r["writes_during_checkpoint"]} writes, the longest '
                f'{"-" if worst is None else f"{worst:.3f}"} s (median write '
                f'before it {"-" if med is None else f"{med * 1e3:.2f}"} ms)',
                flush=True)
          k = f'{prefix}{label(n)}'
          out[f'replay_insert_s.{k}'] = round(r['insert_s'], 2)
          out[f'replay_checkpoint_s.{k}'] = round(r['checkpoint_s'], 3)
          out[f'replay_checkpoint_bytes.{k}'] = r['bytes']
          out[f'replay_restore_s.{k}'] = round(r['restore_s'], 3)
          out[f'replay_server_rss_mb.{k}'] = round(r['rss_mb'])
          out[f'replay_write_max_s_during_checkpoint.{k}'] = (
              None if worst is None else round(worst, 3))

    if not args.skip_resume:
      print(f'\nresume to first learner update (configs/mpo.py:tiny, '
            f'local_mp; first run to {args.budget} env steps, each resume '
            f'+{args.extra_steps}):', flush=True)
      s = resume_study(args.budget, args.extra_steps, tmp_root,
                       args.run_timeout_s)
      b = s['base']
      print(f"first run: {b['wall_s']:.0f} s wall; final counts "
            f"{b['final_counts']['env_steps']} env / "
            f"{b['final_counts']['learner_steps']} learner steps; resumed "
            f"from {b['checkpoint']} ({b['checkpoint_counts']['env_steps']} "
            f"env / {b['checkpoint_counts']['learner_steps']} learner "
            f"steps); its stop checkpoint: "
            f"{b['stop_checkpoint']['items']} items, "
            f"{b['stop_checkpoint']['seconds']:.2f} s, "
            f"{b['stop_checkpoint']['bytes'] / 1e6:.2f} MB")
      print(f'{"resume":<16}{"to 1st update s":>16}{"replay up s":>12}'
            f'{"restored items":>16}{"env steps added":>17}{"wall s":>8}')
      for key in ('with_replay', 'without_replay'):
        r = s[key]
        items = '-' if r['restored_items'] is None else r['restored_items']
        up = r['to_replay_ready_s']
        print(f'{key:<16}{r["to_first_update_s"]:>16.1f}'
              f'{"-" if up is None else f"{up:.1f}":>12}{items:>16}'
              f'{r["env_steps_added"]:>17}{r["wall_s"]:>8.0f}')
      a, w = s['with_replay'], s['without_replay']
      out['resume_to_first_update_s.with_replay'] = round(
          a['to_first_update_s'], 2)
      out['resume_to_first_update_s.without_replay'] = round(
          w['to_first_update_s'], 2)
      out['resume_to_first_update_ratio.without_over_with'] = round(
          w['to_first_update_s'] / a['to_first_update_s'], 2)
      out['resume_to_replay_ready_s.with_replay'] = round(
          a['to_replay_ready_s'], 2)
      out['resume_to_replay_ready_s.without_replay'] = round(
          w['to_replay_ready_s'], 2)
      out['replay_restored_items.with_replay'] = a['restored_items']
      out['replay_restored_items.without_replay'] = w['restored_items'] or 0
      out['env_steps_before_first_update.with_replay'] = a['env_steps_added']
      out['env_steps_before_first_update.without_replay'] = \
          w['env_steps_added']
      worst, killed = stop_maxima(s)
      print('longest stop per node over the three launches (s): ' +
            ', '.join(f'{n} {t:.2f}' for n, t in sorted(worst.items())) +
            f'; killed: {killed or "none"}')
      print('replay checkpoint at each stop: ' + ', '.join(
          f"{k} {s[k]['stop_checkpoint']['seconds']:.2f} s "
          f"({sum(s[k]['stop_checkpoint']['items'].values())} items)"
          for k in ('base', 'with_replay', 'without_replay')))
      for node, t in sorted(worst.items()):
        out[f'stop_seconds_max.{node}'] = t
      out['stop_killed'] = killed
  finally:
    shutil.rmtree(tmp_root, ignore_errors=True)
  load1 = os.getloadavg()
  print(f'load avg:    {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} (end)')
  out.update(_timing.environment_json())
  out['load_avg_1m'] = [round(load0[0], 2), round(load1[0], 2)]
  _timing.print_json(out)


if __name__ == '__main__':
  main()
