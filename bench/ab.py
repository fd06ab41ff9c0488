"""One benchmark, two checkouts, side by side: this checkout's figures as
ratios of another's (a clone of main, say), from runs that alternate.

    python bench/ab.py --base /tmp/main [--rounds 3] -- learner.py --seconds 6

Runs `<checkout>/bench/<script> ARGS` for the base checkout and this one in
turn, --rounds times, the order reversed every round so that a drift in the
machine's load hits both alike, each a process of its own with this
interpreter. Each run's last line is its JSON object; for every numeric key
the two share, the ratio this / base is taken per round and the median
printed. The last line printed is one JSON object: {"ratio.<key>": median
ratio, ..., "rounds": n, "base": path, "this": path, "script": name}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(checkout: str, script: str, args: list) -> dict:
  """The JSON object a benchmark run prints last; exits 1 naming the run
  where it fails or prints none."""
  cmd = [sys.executable, os.path.join(checkout, 'bench', script), *args]
  proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True,
                        check=False)
  lines = proc.stdout.strip().splitlines()
  try:
    payload = json.loads(lines[-1])
  except (IndexError, json.JSONDecodeError):
    payload = None
  if proc.returncode != 0 or not isinstance(payload, dict):
    sys.stderr.write(proc.stderr[-2000:])
    raise SystemExit(f'ab: {" ".join(cmd)} failed (status '
                     f'{proc.returncode}) or printed no JSON line')
  return payload


def numeric(payload: dict) -> dict:
  return {k: float(v) for k, v in payload.items()
          if isinstance(v, (int, float)) and not isinstance(v, bool)}


def ratios(base_runs: list, this_runs: list) -> dict:
  """{key: median over rounds of this / base} for the numeric keys every
  run has and whose base value is not 0."""
  keys = set.intersection(*(set(numeric(p)) for p in base_runs + this_runs))
  out = {}
  for key in sorted(keys):
    pairs = [(numeric(t)[key], numeric(b)[key])
             for t, b in zip(this_runs, base_runs)]
    if all(b != 0 for _, b in pairs):
      out[key] = statistics.median(t / b for t, b in pairs)
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--base', required=True,
                 help='the other checkout (its bench/ runs the same script)')
  p.add_argument('--this', default=HERE,
                 help='the checkout measured against it (default: this one)')
  p.add_argument('--rounds', type=int, default=3)
  p.add_argument('script', help='a script in bench/, e.g. learner.py')
  p.add_argument('args', nargs=argparse.REMAINDER,
                 help='its arguments (after --)')
  a = p.parse_args(argv)
  args = [x for x in a.args if x != '--'] if a.args[:1] == ['--'] else a.args
  base, this = os.path.abspath(a.base), os.path.abspath(a.this)
  for checkout in (base, this):
    if not os.path.isfile(os.path.join(checkout, 'bench', a.script)):
      print(f'ab: {checkout}/bench/{a.script}: no such file', file=sys.stderr)
      return 2
  if a.rounds < 1:
    print(f'ab: --rounds must be >= 1, got {a.rounds}', file=sys.stderr)
    return 2
  base_runs, this_runs = [], []
  for i in range(a.rounds):
    order = [('base', base), ('this', this)]
    for name, checkout in (order if i % 2 == 0 else order[::-1]):
      payload = run_once(checkout, a.script, args)
      (base_runs if name == 'base' else this_runs).append(payload)
      print(f'round {i + 1} {name}: {json.dumps(numeric(payload))}',
            flush=True)
  out = {f'ratio.{k}': round(v, 4) for k, v in
         ratios(base_runs, this_runs).items()}
  out.update(rounds=a.rounds, base=base, this=this, script=a.script)
  print(json.dumps(out))
  return 0


if __name__ == '__main__':
  sys.exit(main())
