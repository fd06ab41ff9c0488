"""Cost of each MPO dual strategy, as a ratio to num_steps=1 (Adam, default).

    python bench/duals.py [--task cartpole_swingup|walker_walk] [--rounds 15]
                          [--block_seconds 1.0] [--steps_per_call 10] [--profile]

Every strategy gets its own learner state and compiled update (batch 256,
3x256 MLPs, 20 samples, K SGD steps per call). They are then timed
interleaved: each round times one block of calls per strategy (the order
rotates between rounds), so machine noise hits all strategies alike. A
strategy's ratio is the median over rounds of (its time per step / the
baseline's time per step in the same round).

Targets: ratio_num_steps_10 <= 1.10, ratio_exact <= 1.15. PASS/FAIL
is printed; the exit status is 0 either way (1 only if TensorFlow, Reverb or
Launchpad got imported). --profile adds XLA cost analysis of each compiled
update and timings of the temperature update alone. The last line printed is
one JSON object with ratio_<strategy> keys.
"""

from __future__ import annotations

import argparse
import sys
import time

import _timing  # binds `tandem` to this checkout

import jax
import jax.numpy as jnp
import numpy as np

from tandem.agents.mpo import config as config_lib
from tandem.agents.mpo import duals as duals_lib
from tandem.agents.mpo import learner
from tandem.agents.mpo import losses

BASELINE = 'num_steps_1'
# name -> (overrides of MPOConfig, in the targets?)
STRATEGIES = {
    BASELINE: {},
    'num_steps_10': {'duals.num_steps': 10},
    'exact': {'duals.solver': 'exact'},
    'after_update': {'duals.temperature_for_weights': 'after_update'},
    'sgd': {'duals.temperature_optimizer.name': 'sgd',
            'duals.alpha_optimizer.name': 'sgd'},
    'rmsprop': {'duals.temperature_optimizer.name': 'rmsprop',
                'duals.alpha_optimizer.name': 'rmsprop'},
    # Diagnostic: the default logs the temperature dual's residual, which
    # runs an exact solve every step in every strategy.
    'no_residual_log': {'duals.log_residual': False},
}
TARGETS = {'num_steps_10': 1.10, 'exact': 1.15}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--task', default='cartpole_swingup',
                 choices=sorted(_timing.TASK_SHAPES))
  p.add_argument('--strategies', default=','.join(STRATEGIES),
                 help='comma-separated subset of: ' + ', '.join(STRATEGIES))
  p.add_argument('--rounds', type=int, default=15)
  p.add_argument('--block_seconds', type=float, default=1.0,
                 help='timed seconds per strategy per round')
  p.add_argument('--steps_per_call', type=int, default=10)
  p.add_argument('--batch_size', type=int, default=256)
  p.add_argument('--num_samples', type=int, default=20)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--profile', action='store_true',
                 help='also print XLA cost analysis and isolated dual timings')
  return p.parse_args(argv)


def make_cfg(args, overrides):
  base = {'policy_layers': (256, 256, 256), 'critic_layers': (256, 256, 256),
          'batch_size': args.batch_size, 'num_samples': args.num_samples,
          'sgd_steps_per_call': args.steps_per_call}
  base.update(overrides)
  return config_lib.replace(config_lib.MPOConfig(), base)


def _cost(compiled) -> dict:
  """flops / bytes accessed from XLA's cost analysis (shape varies by jax)."""
  try:
    ca = compiled.cost_analysis()
  except Exception:  # pragma: no cover - backend without cost analysis
    return {}
  if isinstance(ca, (list, tuple)):
    ca = ca[0] if ca else {}
  ca = ca or {}
  return {'flops': ca.get('flops'), 'bytes': ca.get('bytes accessed')}


def _time_fn(fn, *a, seconds=1.0) -> float:
  """Median seconds per call of a jitted fn (after compile), in 5 blocks."""
  jax.block_until_ready(fn(*a))
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*a))
  one = max(time.perf_counter() - t0, 1e-6)
  n = max(1, int(seconds / 5 / one))
  times = []
  for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(n):
      out = fn(*a)
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t0) / n)
  return _timing.median(times)


def profile(args, names, obs_dim, act_dim, batches, states) -> None:
  """Where the time goes: XLA cost per update, and the duals in isolation."""
  print('Profile: XLA cost analysis of one update call '
        f'(K={args.steps_per_call} steps; loops counted once by XLA)')
  base = None
  for name in names:
    cfg = make_cfg(args, STRATEGIES[name])
    compiled = learner.make_update(cfg).lower(states[name], batches).compile()
    c = _cost(compiled)
    if name == BASELINE:
      base = c
    rel = ''
    if base and c.get('flops') and base.get('flops'):
      rel = f'  flops x{c["flops"] / base["flops"]:.3f}'
    fmt = lambda v: 'n/a' if v is None else f'{v:.3e}'
    print(f'  {name:<16} flops={fmt(c.get("flops"))} '
          f'bytes={fmt(c.get("bytes"))}{rel}')
  print()

  # The temperature update alone on fixed Q-values of the bench's shape.
  n, b = args.num_samples, args.batch_size
  rng = np.random.default_rng(args.seed)
  q = jnp.asarray(rng.standard_normal((n, b)).astype(np.float32))
  actions = jnp.asarray(1.2 * rng.standard_normal((n, b, act_dim)).astype(
      np.float32))
  penalty_q = losses.action_penalty_q(actions)
  print(f'Profile: temperature update alone (q [{n},{b}], with penalty q), '
        'jitted, median us/call')
  rows = []
  for name in names:
    cfg = make_cfg(args, STRATEGIES[name])
    dstate = duals_lib.init(cfg.duals, act_dim)

    def f(ds, q, pq, dcfg=cfg.duals, eps=cfg.epsilon,
          eps_p=cfg.epsilon_penalty):
      return duals_lib.update_temperatures(dcfg, ds, q, eps, pq, eps_p,
                                           jnp.float32(1e-2))

    t = _time_fn(jax.jit(f), dstate, q, penalty_q)
    rows.append((name, t))
  for name, t in rows:
    print(f'  {name:<16} {t * 1e6:9.1f}')

  def solve(q, init):
    return duals_lib.solve_temperature(q, 0.1, floor=1e-8, tolerance=1e-6,
                                       max_iterations=100, init=init)
  solve_j = jax.jit(solve)
  cold = solve_j(q, jnp.float32(10.0))
  warm_init = cold.temperature
  t_cold = _time_fn(solve_j, q, jnp.float32(10.0))
  t_warm = _time_fn(solve_j, q, warm_init)
  it_warm = int(solve_j(q, warm_init).iterations)
  print(f'  solve_temperature from eta=10: {t_cold * 1e6:.1f} us, '
        f'{int(cold.iterations)} iterations; warm-started at the optimum: '
        f'{t_warm * 1e6:.1f} us, {it_warm} iterations')
  print()


def main(argv=None) -> int:
  args = parse_args(argv)
  names = [s.strip() for s in args.strategies.split(',') if s.strip()]
  for s in names:
    if s not in STRATEGIES:
      print(f'unknown strategy {s!r}; known: {list(STRATEGIES)}',
            file=sys.stderr)
      return 2
  if BASELINE not in names:
    names.insert(0, BASELINE)
  obs_dim, act_dim = _timing.TASK_SHAPES[args.task]
  k = args.steps_per_call

  print(f'MPO dual strategies: cost relative to {BASELINE} (adam), '
        f'task shapes {args.task} (O={obs_dim}, D={act_dim})')
  for line in _timing.environment_lines():
    print('  ' + line)
  print(f'  setup:       batch={args.batch_size} layers=256,256,256 '
        f'samples={args.num_samples} K={k} steps/call; {args.rounds} '
        f'interleaved rounds x {args.block_seconds:g}s per strategy')
  print()

  batches = _timing.random_batches(learner.Batch, k, args.batch_size,
                                   obs_dim, act_dim, seed=args.seed)
  runners, calls, compile_s, states = {}, {}, {}, {}
  for name in names:
    cfg = make_cfg(args, STRATEGIES[name])
    state = learner.init(cfg, learner.Dims(obs_dim, act_dim), args.seed)
    if args.profile:
      # A spare state for lowering (the runner's state is donated).
      states[name] = learner.init(cfg, learner.Dims(obs_dim, act_dim),
                                  args.seed)
    r = _timing.Runner(learner.make_update(cfg), state, batches)
    t0 = time.perf_counter()
    r.call(1)
    compile_s[name] = time.perf_counter() - t0
    r.call(2)
    runners[name] = r
  for name in names:      # calibrate after all are compiled and warm
    calls[name] = _timing.calls_for(runners[name], args.block_seconds)

  per_step = {name: [] for name in names}   # seconds per SGD step, per round
  for rnd in range(args.rounds):
    shift = rnd % len(names)
    for name in names[shift:] + names[:shift]:
      dt = runners[name].timed(calls[name])
      per_step[name].append(dt / (calls[name] * k))

  base = per_step[BASELINE]
  ratios = {name: _timing.median([t / b for t, b in zip(per_step[name], base)])
            for name in names}

  header = (f'{"strategy":<16} {"compile s":>9} {"calls/blk":>9} '
            f'{"ms/step":>8} {"steps/s":>8} {"ratio":>6} {"r min":>6} '
            f'{"r max":>6}  target')
  print(header)
  print('-' * len(header))
  verdicts = {}
  for name in names:
    med = _timing.median(per_step[name])
    rs = [t / b for t, b in zip(per_step[name], base)]
    target = ''
    if name in TARGETS:
      ok = ratios[name] <= TARGETS[name]
      verdicts[name] = ok
      target = f'<= {TARGETS[name]:.2f} {"PASS" if ok else "FAIL"}'
    print(f'{name:<16} {compile_s[name]:>9.1f} {calls[name]:>9d} '
          f'{med * 1e3:>8.2f} {1 / med:>8.1f} {ratios[name]:>6.3f} '
          f'{min(rs):>6.3f} {max(rs):>6.3f}  {target}')
  print()
  for name, ok in verdicts.items():
    print(f'{"PASS" if ok else "FAIL"}: ratio_{name} = {ratios[name]:.3f} '
          f'(target <= {TARGETS[name]:.2f})')
  print()

  if args.profile:
    profile(args, names, obs_dim, act_dim, batches, states)

  payload = {f'ratio_{name}': round(ratios[name], 4)
             for name in names if name != BASELINE}
  payload[f'ms_per_step_{BASELINE}'] = round(
      _timing.median(per_step[BASELINE]) * 1e3, 3)
  payload.update({f'pass_{n}': v for n, v in verdicts.items()})
  payload['task'] = args.task
  return _timing.finish(payload, steps_per_call=k, rounds=args.rounds)


if __name__ == '__main__':
  _timing.use_learner_flags()
  sys.exit(main())
