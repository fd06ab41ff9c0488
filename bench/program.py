"""End-to-end throughput of the distributed program, 1 vs 2 actors.

    python bench/program.py [--budget 20000] [--config configs/mpo.py:make_run]

Runs `tandem train` (local_mp) once per actor count on the same config and
budget, back to back, and reports global env steps/s and learner steps/s
over the whole run (counts / global elapsed time from counter.json, start-up
included) and over its steady part (from the learner's CSV, after the first
20% of the budget). The two runs are back to back, not interleaved: their
comparison carries the machine's drift between them. JSON keys:
`env_steps_per_s.<N>_actors` is the overall env rate, and
`learner_steps_per_s.<N>_actors` the steady learner rate. Ends with one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _checkout import REPO_ROOT  # binds `tandem` to this checkout

from tandem.agents.runtime import logs


def run(config: str, actors: int, budget: int, root: str) -> dict:
  name = f'bench_{actors}actors'
  start = time.time()
  proc = subprocess.run(
      [sys.executable, '-m', 'tandem.launch.cli', 'train', '--config', config,
       '--launch', 'local_mp', '--num_actors', str(actors), '--name', name,
       f'--runs_root={root}', f'--env_step_budget={budget}'],
      cwd=REPO_ROOT, capture_output=True, text=True)
  wall = time.time() - start
  if proc.returncode != 0:
    raise SystemExit(f'{name} failed:\n{proc.stdout[-2000:]}\n'
                     f'{proc.stderr[-2000:]}')
  run_dir = os.path.join(root, name)
  counter = json.load(open(os.path.join(run_dir, 'counter.json')))
  counts, elapsed = counter['counts'], counter['elapsed_s']
  rows = logs.read_csv(os.path.join(run_dir, 'logs', 'learner.csv'))
  steady = [r for r in rows if r['env_steps'] > budget * 0.2]
  a, b = steady[0], steady[-1]
  dt = b['elapsed_s'] - a['elapsed_s']
  final = json.load(open(os.path.join(run_dir, 'final.json')))
  return {
      'actors': actors, 'wall_s': wall, 'elapsed_s': elapsed,
      'env_steps_per_s': counts['env_steps'] / elapsed,
      'learner_steps_per_s': counts['learner_steps'] / elapsed,
      'steady_env_steps_per_s': (b['env_steps'] - a['env_steps']) / dt,
      'steady_learner_steps_per_s': (b['learner_steps'] -
                                     a['learner_steps']) / dt,
      'final_eval_return': final['final_eval_return'],
  }


def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument('--budget', type=int, default=20_000)
  p.add_argument('--config', default='configs/mpo.py:make_run')
  p.add_argument('--actors', type=int, nargs='+', default=[1, 2])
  args = p.parse_args()
  root = tempfile.mkdtemp(prefix='tandem-bench-')
  out = {}
  for n in args.actors:
    r = run(args.config, n, args.budget, root)
    print(f"{n} actor(s): {r['env_steps_per_s']:7.1f} env steps/s overall, "
          f"{r['steady_env_steps_per_s']:7.1f} steady | learner "
          f"{r['learner_steps_per_s']:5.1f}/s overall, "
          f"{r['steady_learner_steps_per_s']:5.1f} steady | wall "
          f"{r['wall_s']:.0f} s", flush=True)
    out[f'env_steps_per_s.{n}_actors'] = round(r['env_steps_per_s'], 1)
    out[f'steady_env_steps_per_s.{n}_actors'] = round(
        r['steady_env_steps_per_s'], 1)
    out[f'learner_steps_per_s.{n}_actors'] = round(
        r['steady_learner_steps_per_s'], 1)
  print(json.dumps(out))


if __name__ == '__main__':
  main()
