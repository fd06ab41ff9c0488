"""Cost of a round: the adversarial imitation learner's SGD steps per second.

    python bench/ail.py [--seconds 8] [--repeats 5] [--tasks cartpole_swingup]

For GAIL and AIRL with the settings of configs/ail.py (gail_cartpole,
airl_cartpole: their MPOConfig and AILConfig), per task shape
(cartpole_swingup O=5 D=1, walker_walk O=24 D=6), this times:

  (a) discriminator steps/s: make_discriminator_update,
      discriminator_steps_per_call steps per call, random agent windows
      against 20000 random expert transitions drawn in-graph;
  (b) generator steps/s: make_generator_update, mpo.sgd_steps_per_call steps
      per call, random n-step windows whose rewards the discriminator
      relabels in-graph;
  (c) plain MPO SGD steps/s: agents.mpo.learner.make_update with the same
      MPOConfig on random Batches (one baseline per distinct MPOConfig);
  (d) a round's overall SGD steps/s, with D, G the discriminator and
      generator steps of a round:  (D + G) / (D / a + G / b).

After a compile and warm-up of every update, --seconds per measured thing are
split into --repeats blocks, timed interleaved (each repeat times one block of
every update, in an order that rotates between repeats), so machine noise hits
all of them alike. Rates are the median over repeats. The ratios
round_to_mpo_ratio = d / c and generator_to_mpo_ratio = b / c (what the
relabelling costs) are the median over repeats of the ratio within a repeat.

Imports only jax, optax, numpy, the learner cores (agents.ail, agents.mpo) and
the named configs (configs/ail.py, plain dataclasses); it checks at the end
that no TensorFlow, Reverb or Launchpad got imported. The last line printed
is one JSON object:
  {"gail.discriminator_steps_per_s.cartpole_swingup": ...,
   "gail.generator_steps_per_s.cartpole_swingup": ...,
   "mpo_sgd_steps_per_s.cartpole_swingup": ...,
   "gail.round_sgd_steps_per_s.cartpole_swingup": ...,
   "gail.round_to_mpo_ratio.cartpole_swingup": ...,
   "gail.generator_to_mpo_ratio.cartpole_swingup": ..., (same for airl)
   "device": ...}
"""

from __future__ import annotations

import argparse
import sys
import time

import _timing  # binds `tandem` to this checkout

import jax
import numpy as np

from tandem.agents.ail import learner as ail_learner
from tandem.agents.core.batches import Windows
from tandem.agents.mpo import learner as mpo_learner
from tandem.configs import ail as ail_configs

KINDS = {'gail': ail_configs.gail_cartpole, 'airl': ail_configs.airl_cartpole}
EXPERT_TRANSITIONS = 20_000


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--tasks', default='cartpole_swingup',
                 help='comma-separated, from: ' + ', '.join(_timing.TASK_SHAPES))
  p.add_argument('--kinds', default=','.join(KINDS),
                 help='comma-separated, from: ' + ', '.join(KINDS))
  p.add_argument('--seconds', type=float, default=8.0,
                 help='timed seconds per measured update and task (after '
                      'warm-up), split into --repeats blocks')
  p.add_argument('--repeats', type=int, default=5,
                 help='interleaved timed blocks; the median is reported')
  p.add_argument('--seed', type=int, default=0)
  return p.parse_args(argv)


# --------------------------------------------------------------------------
# Synthetic inputs.


def random_windows(k: int, b: int, n: int, obs_dim: int, act_dim: int,
                   discount: float, seed: int) -> Windows:
  """Full-length (m = n) windows of float32 device arrays [K, B, ...]."""
  rng = np.random.default_rng(seed)
  f = lambda *s: rng.standard_normal(s).astype(np.float32)
  weights = (discount ** np.arange(n)).astype(np.float32)
  windows = Windows(
      observations=f(k, b, n + 1, obs_dim),
      actions=np.clip(f(k, b, n, act_dim), -1.0, 1.0),
      discounts=np.ones((k, b, n), np.float32),
      weights=np.broadcast_to(weights, (k, b, n)).copy(),
      bootstrap=np.full((k, b), discount ** n, np.float32),
      rewards=f(k, b, n))
  return jax.device_put(windows)


def random_expert(size: int, obs_dim: int, act_dim: int, seed: int):
  """Device Transitions [size], as expert_transitions builds them."""
  rng = np.random.default_rng(seed)
  f = lambda *s: rng.standard_normal(s).astype(np.float32)

  class Demos:  # the fields expert_transitions reads
    observation = f(size, obs_dim)
    action = np.clip(f(size, act_dim), -1.0, 1.0)
    next_observation = f(size, obs_dim)
    discount = np.ones((size,), np.float32)

  return ail_learner.expert_transitions(Demos)


# --------------------------------------------------------------------------
# Timed things.


class Timed:
  """One jitted update with its state and inputs, and its block rates."""

  def __init__(self, name: str, update, state, inputs: tuple,
               steps_per_call: int):
    self.name, self.update, self.state = name, update, state
    self.inputs, self.k = inputs, steps_per_call
    self.compile_s = 0.0
    self.calls_per_block = 1
    self.rates: list[float] = []

  def call(self, n: int = 1) -> None:
    metrics = None
    for _ in range(n):
      self.state, metrics = self.update(self.state, *self.inputs)
    jax.block_until_ready((self.state, metrics))

  def seconds_for(self, n: int) -> float:
    jax.block_until_ready(self.state)
    t0 = time.perf_counter()
    self.call(n)
    return time.perf_counter() - t0

  def prepare(self, block_seconds: float) -> None:
    t0 = time.perf_counter()
    self.call(1)                       # compile + first run
    self.compile_s = time.perf_counter() - t0
    self.call(2)                       # warm-up
    dt = self.seconds_for(1)
    self.calls_per_block = max(1, int(round(block_seconds / max(dt, 1e-6))))

  def block(self) -> float:
    """Times one block; returns (and records) its SGD steps per second."""
    n = self.calls_per_block
    rate = n * self.k / self.seconds_for(n)
    self.rates.append(rate)
    return rate

  @property
  def median(self) -> float:
    return _timing.median(self.rates)


def round_rate(d_steps: int, g_steps: int, disc_rate: float,
               gen_rate: float) -> float:
  return (d_steps + g_steps) / (d_steps / disc_rate + g_steps / gen_rate)


def bench_task(task: str, kinds: list[str], args) -> dict:
  obs_dim, act_dim = _timing.TASK_SHAPES[task]
  dims = mpo_learner.Dims(observation=obs_dim, action=act_dim)
  expert = random_expert(EXPERT_TRANSITIONS, obs_dim, act_dim, args.seed + 7)

  timed: dict[str, Timed] = {}
  mpo_key_of: dict[str, str] = {}     # kind -> name of its MPO baseline
  mpo_names: dict[str, str] = {}      # repr(MPOConfig) -> baseline name
  cfgs = {}
  for kind in kinds:
    train_cfg = KINDS[kind]()
    mpo_cfg, ail_cfg = train_cfg.mpo, train_cfg.ail
    cfgs[kind] = (mpo_cfg, ail_cfg)
    state_d = ail_learner.init(mpo_cfg, ail_cfg, dims, args.seed)
    state_g = ail_learner.init(mpo_cfg, ail_cfg, dims, args.seed)
    kd = ail_cfg.discriminator_steps_per_call
    kg = mpo_cfg.sgd_steps_per_call
    d_windows = random_windows(kd, ail_cfg.batch_size, mpo_cfg.n_step,
                               obs_dim, act_dim, mpo_cfg.discount,
                               args.seed + 1)
    g_windows = random_windows(kg, mpo_cfg.batch_size, mpo_cfg.n_step,
                               obs_dim, act_dim, mpo_cfg.discount,
                               args.seed + 2)
    timed[f'{kind}.discriminator'] = Timed(
        f'{kind}.discriminator',
        ail_learner.make_discriminator_update(mpo_cfg, ail_cfg), state_d,
        (d_windows, expert), kd)
    timed[f'{kind}.generator'] = Timed(
        f'{kind}.generator',
        ail_learner.make_generator_update(mpo_cfg, ail_cfg), state_g,
        (g_windows, expert), kg)
    key = repr(mpo_cfg)
    if key not in mpo_names:
      name = 'mpo' if not mpo_names else f'mpo.{kind}'
      mpo_names[key] = name
      batches = _timing.random_batches(mpo_learner.Batch, kg,
                                       mpo_cfg.batch_size, obs_dim, act_dim,
                                       seed=args.seed + 3)
      timed[name] = Timed(name, mpo_learner.make_update(mpo_cfg),
                          mpo_learner.init(mpo_cfg, dims, args.seed),
                          (batches,), kg)
    mpo_key_of[kind] = mpo_names[key]

  block_seconds = args.seconds / args.repeats
  for t in timed.values():
    print(f'  [{task}] compiling and warming up {t.name} ...', flush=True)
    t.prepare(block_seconds)

  order = list(timed)
  round_rates = {k: [] for k in kinds}
  round_ratios = {k: [] for k in kinds}
  gen_ratios = {k: [] for k in kinds}
  for r in range(args.repeats):
    shift = r % len(order)
    rates = {name: timed[name].block()
             for name in order[shift:] + order[:shift]}
    for kind in kinds:
      _, ail_cfg = cfgs[kind]
      a = rates[f'{kind}.discriminator']
      b = rates[f'{kind}.generator']
      c = rates[mpo_key_of[kind]]
      d = round_rate(ail_cfg.discriminator_steps_per_round,
                     ail_cfg.generator_steps_per_round, a, b)
      round_rates[kind].append(d)
      round_ratios[kind].append(d / c)
      gen_ratios[kind].append(b / c)
    print(f'  [{task}] repeat {r + 1}/{args.repeats}: ' + ', '.join(
        f'{n} {rates[n]:.0f}' for n in order), flush=True)

  skipped = {}
  for name, t in timed.items():
    gen = t.state.generator if hasattr(t.state, 'generator') else t.state
    if hasattr(gen, 'skipped') and not name.endswith('discriminator'):
      s = int(jax.device_get(gen.skipped))
      if s:
        skipped[name] = (s, int(jax.device_get(gen.steps)))

  kinds_out = {}
  for kind in kinds:
    mpo_cfg, ail_cfg = cfgs[kind]
    kinds_out[kind] = dict(
        d_steps=ail_cfg.discriminator_steps_per_round,
        g_steps=ail_cfg.generator_steps_per_round,
        kd=ail_cfg.discriminator_steps_per_call,
        kg=mpo_cfg.sgd_steps_per_call,
        discriminator=timed[f'{kind}.discriminator'],
        generator=timed[f'{kind}.generator'],
        mpo=timed[mpo_key_of[kind]],
        round=_timing.median(round_rates[kind]),
        round_ratio=_timing.median(round_ratios[kind]),
        generator_ratio=_timing.median(gen_ratios[kind]))
  return dict(task=task, obs=obs_dim, act=act_dim, timed=timed,
              kinds=kinds_out, mpo_names=sorted(set(mpo_key_of.values())),
              skipped=skipped)


# --------------------------------------------------------------------------


def main(argv=None) -> int:
  args = parse_args(argv)
  tasks = _timing.parse_tasks(args.tasks)
  if tasks is None:
    return 2
  kinds = [k.strip() for k in args.kinds.split(',') if k.strip()]
  for k in kinds:
    if k not in KINDS:
      print(f'unknown kind {k!r}; known: {list(KINDS)}', file=sys.stderr)
      return 2
  if args.repeats < 1 or args.seconds <= 0:
    print('--repeats must be >= 1 and --seconds > 0', file=sys.stderr)
    return 2

  print('Adversarial imitation learner: cost of a round (SGD steps/s)')
  for line in _timing.environment_lines():
    print('  ' + line)
  for kind in kinds:
    c = KINDS[kind]()
    print(f'  {kind + ":":<12} configs/ail.py:{c.name}  '
          f'mpo batch={c.mpo.batch_size} layers={c.mpo.policy_layers} '
          f'samples={c.mpo.num_samples} n_step={c.mpo.n_step} '
          f'K={c.mpo.sgd_steps_per_call}; disc {c.ail.kind}/{c.ail.reward} '
          f'layers={c.ail.layers} batch={c.ail.batch_size} '
          f'gp={c.ail.gradient_penalty:g} K={c.ail.discriminator_steps_per_call}'
          f'; round = {c.ail.discriminator_steps_per_round} D + '
          f'{c.ail.generator_steps_per_round} G steps')
  print(f'  timing:      {args.seconds:g}s per update and task in '
        f'{args.repeats} interleaved blocks, median; expert data '
        f'{EXPERT_TRANSITIONS} random transitions')
  print()
  results = [bench_task(t, kinds, args) for t in tasks]
  print()

  header = (f'{"task":<18} {"update":<20} {"K":>3} {"compile s":>9} '
            f'{"calls/blk":>9} {"min":>9} {"median":>9} {"max":>9} '
            f'{"ms/step":>8}')
  print(header)
  print('-' * len(header))
  for r in results:
    for name, t in r['timed'].items():
      print(f'{r["task"]:<18} {name:<20} {t.k:>3} {t.compile_s:>9.1f} '
            f'{t.calls_per_block:>9d} {min(t.rates):>9.1f} {t.median:>9.1f} '
            f'{max(t.rates):>9.1f} {1e3 / t.median:>8.2f}')
    for name, (s, n) in r['skipped'].items():
      print(f'  note: {name}: {s} of {n} steps were skipped as non-finite '
            '(timing still counts them)')
  print()
  header2 = (f'{"task":<18} {"kind":<5} {"D:G":>5} {"disc/s":>9} '
             f'{"gen/s":>9} {"mpo/s":>9} {"round/s":>9} {"round/mpo":>9} '
             f'{"gen/mpo":>8}')
  print(header2)
  print('-' * len(header2))
  for r in results:
    for kind, k in r['kinds'].items():
      print(f'{r["task"]:<18} {kind:<5} {k["d_steps"]:>2}:{k["g_steps"]:<2} '
            f'{k["discriminator"].median:>9.1f} {k["generator"].median:>9.1f} '
            f'{k["mpo"].median:>9.1f} {k["round"]:>9.1f} '
            f'{k["round_ratio"]:>9.3f} {k["generator_ratio"]:>8.3f}')
  print('  round/s = (D + G) / (D / disc/s + G / gen/s); the ratios are '
        'medians of per-repeat ratios')
  print()

  payload = {}
  for r in results:
    task = r['task']
    for name in r['mpo_names']:
      payload[f'{name}_sgd_steps_per_s.{task}'] = round(
          r['timed'][name].median, 2)
    for kind, k in r['kinds'].items():
      payload[f'{kind}.discriminator_steps_per_s.{task}'] = round(
          k['discriminator'].median, 2)
      payload[f'{kind}.generator_steps_per_s.{task}'] = round(
          k['generator'].median, 2)
      payload[f'{kind}.round_sgd_steps_per_s.{task}'] = round(k['round'], 2)
      payload[f'{kind}.round_to_mpo_ratio.{task}'] = round(
          k['round_ratio'], 4)
      payload[f'{kind}.generator_to_mpo_ratio.{task}'] = round(
          k['generator_ratio'], 4)
  return _timing.finish(payload, seconds=args.seconds, repeats=args.repeats)


if __name__ == '__main__':
  _timing.use_learner_flags()
  sys.exit(main())
