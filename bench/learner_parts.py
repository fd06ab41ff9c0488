"""Where an MPO learner step's time goes: what `estep_states='next'` drops
and what it keeps.

    python bench/learner_parts.py [--tasks cartpole_swingup,walker_walk]
                                  [--block_seconds 1] [--rounds 9]
                                  [--critic_layers 512,512,256]

`next` drops one of the two target-critic evaluations of N·B (state, action)
pairs a `current` step makes, and the target policy at s. With `dropped` the
cost of those and `next` the cost of a `next` step, next/current = 1 +
dropped/next, which reaches 1.8 only if next ≤ 1.25·dropped: the work `next`
keeps besides its own critic evaluation may cost at most a quarter of one
(plus 1.25× the target policy). This script measures, side by side in
interleaved blocks (order reversed every round, the median over rounds
reported):

  step_current, step_next   the learner's jitted update (learner.make_update)
  target_critic             T alone: the target critic on N·B pairs at s'
  target_policy             the target policy at s' and its N samples
  critic_training           the online critic's TD loss, gradient and
                            optimizer update on the batch's B pairs (s, a)
  policy_training           the M-step's loss (both decoupled cross-entropies
                            for the E-step and the action-penalty weights,
                            the KL penalties), gradient and optimizer update
                            at B states
  duals                     temperature and penalty-temperature update (with
                            the residual log) and the alphas' update

The parts are composed from the same networks/losses/duals functions that
learner.sgd_step calls, each in its own lax.scan over K steps; in the full
step XLA fuses and overlaps them, so their sum need not equal the step.
Derived: `kept_training` = critic_training + policy_training + target_policy
(training `next` cannot drop) against `kept_allowed` = 1.25·(target_critic +
target_policy) - target_critic, what 1.8 leaves for everything besides T.

Also printed, free of timing noise: the floating-point operations of one
`current` and one `next` step as XLA's cost analysis counts them (compiled
for K = 1, since it counts a loop body once). Their ratio is what
next/current approaches on a device where the step is FLOP-bound; where
fixed per-op costs weigh more (small batches, an accelerator), it is lower.

Imports only jax, optax, numpy and agents.mpo, like bench/learner.py, so it
runs unchanged on an accelerator image. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import sys

import _timing  # binds `tandem` to this checkout

import jax
import jax.numpy as jnp
import optax

from tandem.agents.mpo import config as config_lib
from tandem.agents.mpo import duals as duals_lib
from tandem.agents.mpo import learner
from tandem.agents.mpo import losses
from tandem.agents.mpo import networks

PARTS = ('step_current', 'step_next', 'target_critic', 'target_policy',
         'critic_training', 'policy_training', 'duals')


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  _timing.add_learner_args(p)
  p.add_argument('--block_seconds', type=float, default=1.0,
                 help='about this long per part per round')
  p.add_argument('--rounds', type=int, default=9,
                 help='interleaved rounds; the median is reported')
  return p.parse_args(argv)


def _config(args, where: str) -> config_lib.MPOConfig:
  policy_layers, critic_layers = _timing.layer_sizes(args)
  return config_lib.replace(config_lib.MPOConfig(), {
      'policy_layers': policy_layers, 'critic_layers': critic_layers,
      'batch_size': args.batch_size, 'num_samples': args.num_samples,
      'sgd_steps_per_call': args.steps_per_call, 'estep_states': where})


def _scanned(body):
  """jit(carry, xs -> scan(body)): one call runs K = len(xs) steps."""
  return jax.jit(lambda carry, xs: jax.lax.scan(body, carry, xs))


def part_runners(args, obs_dim: int, act_dim: int) -> dict:
  """Part name -> _timing.Runner whose call runs K steps of that part."""
  k, n = args.steps_per_call, args.num_samples
  cfg = _config(args, 'next')
  dims = learner.Dims(observation=obs_dim, action=act_dim)
  state = learner.init(cfg, dims, args.seed)
  batches = _timing.random_batches(learner.Batch, k, cfg.batch_size, obs_dim,
                                   act_dim, seed=args.seed)
  key = jax.random.PRNGKey(args.seed + 1)
  k_act, k_w = jax.random.split(key)
  # Fresh actions every step so no part's work is loop-invariant.
  actions = jax.random.normal(k_act, (k, n, cfg.batch_size, act_dim))
  head = cfg.policy_head_kwargs
  tile = lambda o: jnp.broadcast_to(o, (n,) + o.shape)
  runners = {}

  for where in ('current', 'next'):
    c = _config(args, where)
    runners['step_' + where] = _timing.Runner(
        learner.make_update(c), learner.init(c, dims, args.seed), batches)

  def target_critic(carry, x):
    b, a = x
    q = networks.apply_critic(state.target_critic, tile(b.next_observation), a)
    # Accumulated, so each call waits for the one before (as the step does).
    return carry + jnp.mean(q), None
  runners['target_critic'] = _timing.Runner(
      _scanned(target_critic), jnp.float32(0), (batches, actions))

  def target_policy(carry, b):
    pi = networks.apply_policy(state.target_policy, b.next_observation, **head)
    return carry + jnp.mean(networks.gaussian_sample(key, pi, n)), None
  runners['target_policy'] = _timing.Runner(
      _scanned(target_policy), jnp.float32(0), batches)

  critic_opt = learner.critic_optimizer(cfg)

  def critic_training(carry, b):
    params, opt_state = carry
    grad = jax.grad(lambda p: losses.critic_loss(
        networks.apply_critic(p, b.observation, b.action), b.reward))(params)
    updates, opt_state = critic_opt.update(grad, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None
  runners['critic_training'] = _timing.Runner(
      _scanned(critic_training), (state.critic, state.critic_opt), batches)

  policy_opt = learner.policy_optimizer(cfg)
  target_pi = networks.apply_policy(state.target_policy,
                                    batches.next_observation[0], **head)
  weights = jax.nn.softmax(jax.random.normal(k_w, (n, cfg.batch_size)), 0)
  # The action penalty's weights differ from the E-step's, as in the step:
  # the same array twice would let XLA merge the two terms into one.
  weights_penalty = jnp.flip(weights, axis=0)
  alpha = jnp.ones((act_dim,), jnp.float32)

  def policy_training(carry, x):
    params, opt_state = carry
    b, a = x

    def loss(p):
      online = networks.apply_policy(p, b.next_observation, **head)
      terms = losses.mstep_terms(online, target_pi, a, weights,
                                 cfg.per_dim_constraining)
      pen = losses.mstep_terms(online, target_pi, a, weights_penalty,
                               cfg.per_dim_constraining)
      return (terms.cross_entropy_mean + terms.cross_entropy_stddev +
              pen.cross_entropy_mean + pen.cross_entropy_stddev +
              losses.kl_penalty(alpha, terms.kl_mean) +
              losses.kl_penalty(alpha, terms.kl_stddev))
    grad = jax.grad(loss)(params)
    updates, opt_state = policy_opt.update(grad, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None
  runners['policy_training'] = _timing.Runner(
      _scanned(policy_training), (state.policy, state.policy_opt),
      (batches, actions))

  eps_mean, eps_stddev = learner.kl_bounds(cfg, act_dim)
  kl = jnp.full((act_dim,), 1e-3, jnp.float32)
  rate = jnp.float32(cfg.duals.temperature_optimizer.learning_rate)

  def duals(dual_state, a):
    q = jnp.sum(a, axis=-1)      # any [N, B] values with a spread
    dual_state, info = duals_lib.update_temperatures(
        cfg.duals, dual_state, q, cfg.epsilon, losses.action_penalty_q(a),
        cfg.epsilon_penalty, rate)
    dual_state = duals_lib.update_alphas(cfg.duals, dual_state, kl, kl,
                                         eps_mean, eps_stddev, rate)
    return dual_state, info.residual
  runners['duals'] = _timing.Runner(_scanned(duals), state.duals, actions)
  return runners


def step_flops(args, obs_dim: int, act_dim: int) -> dict:
  """'current'/'next' -> XLA's flop count of one learner step."""
  out = {}
  for where in ('current', 'next'):
    c = config_lib.replace(_config(args, where), {'sgd_steps_per_call': 1})
    state = learner.init(c, learner.Dims(obs_dim, act_dim), args.seed)
    batch = _timing.random_batches(learner.Batch, 1, c.batch_size, obs_dim,
                                   act_dim, seed=args.seed)
    cost = learner.make_update(c).lower(state, batch).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    out[where] = float(cost['flops'])
  return out


def bench_task(task: str, args) -> dict:
  obs_dim, act_dim = _timing.TASK_SHAPES[task]
  flops = step_flops(args, obs_dim, act_dim)
  runners = part_runners(args, obs_dim, act_dim)
  for r in runners.values():
    r.call(3)                      # compile, then warm up
  calls = {p: _timing.calls_for(r, args.block_seconds)
           for p, r in runners.items()}
  ms = {p: [] for p in PARTS}
  for i in range(args.rounds):
    for p in (PARTS if i % 2 == 0 else PARTS[::-1]):
      dt = runners[p].timed(calls[p])
      ms[p].append(1e3 * dt / (calls[p] * args.steps_per_call))
  med = {p: _timing.median(v) for p, v in ms.items()}
  kept = (med['critic_training'] + med['policy_training'] +
          med['target_policy'])
  allowed = 1.25 * (med['target_critic'] + med['target_policy']) - \
      med['target_critic']
  return dict(
      task=task, ms=med, spread={p: (min(v), max(v)) for p, v in ms.items()},
      kept_training=kept, kept_allowed=allowed,
      next_to_current=med['step_current'] / med['step_next'], flops=flops)


def main(argv=None) -> int:
  args = parse_args(argv)
  tasks = _timing.parse_tasks(args.tasks)
  if tasks is None:
    return 2
  print('MPO learner step, part by part (ms per SGD step)')
  for line in _timing.environment_lines():
    print('  ' + line)
  sizes = _timing.layer_fields(args)
  print(f'  setup:       batch={args.batch_size} policy={sizes["layers"]} '
        f'critic={sizes["critic_layers"]} samples={args.num_samples} '
        f'default duals, K={args.steps_per_call}, '
        f'{args.rounds} rounds of ~{args.block_seconds:g}s blocks')
  print()
  payload = {}
  for task in tasks:
    r = bench_task(task, args)
    print(task)
    for p in PARTS:
      lo, hi = r['spread'][p]
      print(f'  {p:<16} {r["ms"][p]:8.3f}   (min {lo:.3f}, max {hi:.3f})')
    print(f'  besides T, next keeps training that costs '
          f'{r["kept_training"]:.3f} alone; 1.8 allows '
          f'{r["kept_allowed"]:.3f} for all of it. next/current: '
          f'{r["next_to_current"]:.3f}')
    fl = r['flops']
    print(f'  GFLOP per step: current {fl["current"] / 1e9:.3f}, next '
          f'{fl["next"] / 1e9:.3f}, ratio {fl["current"] / fl["next"]:.3f}')
    print()
    for p in PARTS:
      payload[f'ms.{p}.{task}'] = round(r['ms'][p], 3)
    payload[f'ms.kept_training.{task}'] = round(r['kept_training'], 3)
    payload[f'ms.kept_allowed.{task}'] = round(r['kept_allowed'], 3)
    payload[f'next_to_current_ratio.{task}'] = round(r['next_to_current'], 3)
    for where, f in r['flops'].items():
      payload[f'gflop_per_step.{where}.{task}'] = round(f / 1e9, 4)
    payload[f'flop_ratio_current_to_next.{task}'] = round(
        r['flops']['current'] / r['flops']['next'], 3)
  return _timing.finish(payload, steps_per_call=args.steps_per_call,
                        batch_size=args.batch_size,
                        num_samples=args.num_samples,
                        **_timing.layer_fields(args), rounds=args.rounds)


if __name__ == '__main__':
  _timing.use_learner_flags()
  sys.exit(main())
