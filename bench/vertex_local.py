"""`--launch vertex_local` against `local_mp`: the same program, start-up and
throughput, side by side.

    python bench/vertex_local.py [--budget 20000] [--actors 2] [--repeats 2]
                                 [--config configs/mpo.py:make_run]

Runs `tandem train` on the same config, budget and actor count under both
launches, interleaved (local_mp, vertex_local, local_mp, ...), so the
machine's drift falls on both alike. Per run: the time from the command's
start to the first env step the counter publishes (progress.json, polled
every 0.1 s: start-up, the program's import and connection time), the
command's wall time, and global env steps/s over the counter's elapsed time.
Ends with one JSON line: per-run figures and the ratios vertex_local /
local_mp of the medians (`startup_ratio`, `env_steps_per_s_ratio`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _checkout import REPO_ROOT  # binds `tandem` to this checkout

LAUNCHES = ('local_mp', 'vertex_local')


def _env_steps(progress: str) -> int:
  try:
    with open(progress) as f:
      return json.load(f)['counts']['env_steps']
  except (OSError, ValueError, KeyError):
    return 0


def run(launch: str, config: str, actors: int, budget: int, root: str,
        name: str) -> dict:
  run_dir = os.path.join(root, name)
  progress = os.path.join(run_dir, 'progress.json')
  start = time.time()
  proc = subprocess.Popen(
      [sys.executable, '-m', 'tandem.launch.cli', 'train', '--config', config,
       '--launch', launch, '--num_actors', str(actors), '--name', name,
       f'--runs_root={root}', f'--env_step_budget={budget}'],
      cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  first_step = None
  while proc.poll() is None:
    if first_step is None and _env_steps(progress) > 0:
      first_step = time.time() - start
    time.sleep(0.1)
  out, err = proc.communicate()
  wall = time.time() - start
  if proc.returncode != 0:
    raise SystemExit(f'{name} failed:\n{out[-2000:]}\n{err[-2000:]}')
  with open(os.path.join(run_dir, 'counter.json')) as f:
    counter = json.load(f)
  return {'launch': launch, 'startup_s': first_step, 'wall_s': wall,
          'env_steps_per_s': counter['counts']['env_steps'] /
                             counter['elapsed_s']}


def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument('--budget', type=int, default=20_000)
  p.add_argument('--actors', type=int, default=2)
  p.add_argument('--repeats', type=int, default=2)
  p.add_argument('--config', default='configs/mpo.py:make_run')
  args = p.parse_args()
  root = tempfile.mkdtemp(prefix='tandem-bench-vertex-local-')
  runs = []
  for k in range(args.repeats):
    for launch in LAUNCHES:
      r = run(launch, args.config, args.actors, args.budget, root,
              f'{launch}_{k}')
      print(json.dumps(r), flush=True)
      runs.append(r)
  med = {launch: {key: statistics.median(r[key] for r in runs
                                         if r['launch'] == launch)
                  for key in ('startup_s', 'wall_s', 'env_steps_per_s')}
         for launch in LAUNCHES}
  ratio = lambda key: med['vertex_local'][key] / med['local_mp'][key]
  print(json.dumps({'config': args.config, 'budget': args.budget,
                    'actors': args.actors, 'runs': runs, 'medians': med,
                    'startup_ratio': ratio('startup_s'),
                    'wall_ratio': ratio('wall_s'),
                    'env_steps_per_s_ratio': ratio('env_steps_per_s')}))


if __name__ == '__main__':
  main()
