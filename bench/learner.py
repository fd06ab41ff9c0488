"""Learner throughput: MPO SGD steps per second on synthetic batches.

    python bench/learner.py [--seconds 12] [--steps_per_call 10] [--repeats 5]
                            [--critic_layers 512,512,256]

Batch 256, 3x256 policy and critic MLPs (--critic_layers sets the critic's
alone: Acme's make_control_networks default is 512,512,256), 20 action
samples, default duals, for the observation/action shapes of cartpole_swingup
(5, 1) and walker_walk (24, 6), with the E-step at s (estep_states='current',
the default) and at s' reusing the bootstrap's samples ('next': half the
critic work), timed in interleaved blocks. Each jitted call runs
--steps_per_call SGD steps (lax.scan); after a compile/warm-up, --seconds per
task are split into --repeats timed blocks and the median block rate is
reported.

Imports only jax, optax, numpy and agents.mpo (no TensorFlow, Reverb or
Launchpad), so it runs unchanged on a bare accelerator image; it checks that
at the end. The last line printed is one JSON object:
  {"learner_steps_per_s.cartpole_swingup": ..., "learner_steps_per_s_next.cartpole_swingup": ...,
   "next_to_current_ratio.cartpole_swingup": ..., (same for walker_walk), "device": ...}
With --mog, a third setting is timed in the same interleaved blocks: 'next'
with the mixture-of-Gaussians critic (critic_type='mog', Acme's default
critic), adding learner_steps_per_s_next_mog.<task> and
mog_to_scalar_ratio_next.<task> (its rate over scalar 'next''s).
"""

from __future__ import annotations

import argparse
import sys
import time

import _timing  # binds `tandem` to this checkout

import jax

from tandem.agents.mpo import config as config_lib
from tandem.agents.mpo import learner

# Timed side by side; `learner_steps_per_s` keeps the default ('current').
ESTEP_STATES = ('current', 'next')
# setting name -> (estep_states, critic_type)
SETTINGS = {'current': ('current', 'scalar'), 'next': ('next', 'scalar'),
            'next_mog': ('next', 'mog')}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  _timing.add_learner_args(p)
  p.add_argument('--seconds', type=float, default=12.0,
                 help='timed seconds per task (after warm-up)')
  p.add_argument('--repeats', type=int, default=5,
                 help='timed blocks per task; the median is reported')
  p.add_argument('--mog', action='store_true',
                 help="also time 'next' with the mixture-of-Gaussians critic")
  p.add_argument('--mog_value_samples', type=int, default=128,
                 help='its return samples per bootstrap action (MPOConfig.'
                      'mog_num_value_samples; 128, as Acme)')
  return p.parse_args(argv)


def bench_task(task: str, args) -> dict:
  """Times estep_states='current' (the default) and 'next' side by side:
  interleaved blocks, the order alternating, so machine noise hits both."""
  obs_dim, act_dim = _timing.TASK_SHAPES[task]
  policy_layers, critic_layers = _timing.layer_sizes(args)
  k = args.steps_per_call
  runners, compile_s = {}, {}
  names = ESTEP_STATES + (('next_mog',) if args.mog else ())
  for where in names:
    estep_states, critic_type = SETTINGS[where]
    cfg = config_lib.replace(config_lib.MPOConfig(), {
        'policy_layers': policy_layers,
        'critic_layers': critic_layers,
        'batch_size': args.batch_size,
        'num_samples': args.num_samples,
        'sgd_steps_per_call': k,
        'estep_states': estep_states,
        'critic_type': critic_type,
        'mog_num_value_samples': args.mog_value_samples,
    })
    state = learner.init(cfg, learner.Dims(observation=obs_dim,
                                           action=act_dim), args.seed)
    batches = _timing.random_batches(learner.Batch, k, cfg.batch_size,
                                     obs_dim, act_dim, seed=args.seed)
    runner = _timing.Runner(learner.make_update(cfg), state, batches)
    t0 = time.perf_counter()
    runner.call(1)                       # compile + first run
    compile_s[where] = time.perf_counter() - t0
    runner.call(2)                       # warm-up
    runners[where] = runner
  per_block = args.seconds / args.repeats
  calls = {w: _timing.calls_for(r, per_block) for w, r in runners.items()}
  rates = {w: [] for w in runners}
  for i in range(args.repeats):
    order = names if i % 2 == 0 else names[::-1]
    for where in order:
      rates[where].append(calls[where] * k / runners[where].timed(calls[where]))
  ratios = [n / c for n, c in zip(rates['next'], rates['current'])]
  mog = ([m / n for m, n in zip(rates['next_mog'], rates['next'])]
         if args.mog else None)
  out = {}
  for where, runner in runners.items():
    out[where] = dict(
        compile_s=compile_s[where], calls_per_block=calls[where],
        rates=rates[where], median=_timing.median(rates[where]),
        skipped=int(jax.device_get(runner.state.skipped)),
        steps=int(jax.device_get(runner.state.steps)))
  return dict(task=task, obs=obs_dim, act=act_dim, by_states=out,
              next_to_current=_timing.median(ratios),
              mog_to_scalar=_timing.median(mog) if mog else None)


def main(argv=None) -> int:
  args = parse_args(argv)
  tasks = _timing.parse_tasks(args.tasks)
  if tasks is None:
    return 2
  print('MPO learner throughput (SGD steps/s)')
  for line in _timing.environment_lines():
    print('  ' + line)
  sizes = _timing.layer_fields(args)
  print(f'  setup:       batch={args.batch_size} policy={sizes["layers"]} '
        f'critic={sizes["critic_layers"]} samples={args.num_samples} '
        f'default duals, K={args.steps_per_call} steps/call, '
        f'{args.seconds:g}s x {args.repeats} blocks per task')
  print()
  results = [bench_task(t, args) for t in tasks]

  header = (f'{"task":<18} {"estep_states":<12} {"O":>3} {"D":>3} '
            f'{"compile s":>9} {"calls/blk":>9} {"min":>9} {"median":>9} '
            f'{"max":>9} {"ms/step":>8}')
  print(header)
  print('-' * len(header))
  for r in results:
    for where, x in r['by_states'].items():
      print(f'{r["task"]:<18} {where:<12} {r["obs"]:>3} {r["act"]:>3} '
            f'{x["compile_s"]:>9.1f} {x["calls_per_block"]:>9d} '
            f'{min(x["rates"]):>9.1f} {x["median"]:>9.1f} '
            f'{max(x["rates"]):>9.1f} {1e3 / x["median"]:>8.2f}')
      if x['skipped']:
        print(f'  note: {x["skipped"]} of {x["steps"]} steps were skipped as '
              'non-finite (timing still counts them)')
    print(f'{"":<18} next/current (median of per-block ratios): '
          f'{r["next_to_current"]:.3f}')
    if r['mog_to_scalar'] is not None:
      print(f'{"":<18} next_mog/next (median of per-block ratios): '
            f'{r["mog_to_scalar"]:.3f}')
  print()

  payload = {}
  for r in results:
    t = r['task']
    payload[f'learner_steps_per_s.{t}'] = round(
        r['by_states']['current']['median'], 2)
    payload[f'learner_steps_per_s_next.{t}'] = round(
        r['by_states']['next']['median'], 2)
    payload[f'next_to_current_ratio.{t}'] = round(r['next_to_current'], 3)
    if r['mog_to_scalar'] is not None:
      payload[f'learner_steps_per_s_next_mog.{t}'] = round(
          r['by_states']['next_mog']['median'], 2)
      payload[f'mog_to_scalar_ratio_next.{t}'] = round(r['mog_to_scalar'], 3)
  return _timing.finish(payload, steps_per_call=args.steps_per_call,
                        batch_size=args.batch_size,
                        num_samples=args.num_samples,
                        **_timing.layer_fields(args),
                        **({'mog_value_samples': args.mog_value_samples}
                           if args.mog else {}))


if __name__ == '__main__':
  _timing.use_learner_flags()
  sys.exit(main())
