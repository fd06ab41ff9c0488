"""bench/learner_parts.py at toy sizes: every part runs, the JSON line has
its keys, and the flop counts show what `next` drops (one target-critic
evaluation of N·B pairs and the target policy at s), nothing more or less."""

import json
import math
import os
import subprocess
import sys

from tests import REPO_ROOT, load_script

parts = load_script('bench', 'learner_parts')

LAYERS, B, N = (32, 32), 16, 4
ARGS = ['--tasks', 'cartpole_swingup', '--block_seconds', '0.02',
        '--rounds', '1', '--layers', ','.join(map(str, LAYERS)),
        '--batch_size', str(B), '--num_samples', str(N)]


def _mlp_flops(n_in, layers, n_out):
  sizes = (n_in,) + tuple(layers) + (n_out,)
  return sum(2 * a * b for a, b in zip(sizes[:-1], sizes[1:]))


def test_prints_every_part_and_the_flop_ratio():
  # Its own process: the pytest process has imported Launchpad and
  # TensorFlow, which the script must not need (and checks that it does not).
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, 'bench', 'learner_parts.py')] +
      ARGS, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
      check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  payload = json.loads(proc.stdout.strip().splitlines()[-1])
  for p in parts.PARTS:
    ms = payload[f'ms.{p}.cartpole_swingup']
    assert math.isfinite(ms) and ms > 0, p
  assert 'error' not in payload
  assert payload['flop_ratio_current_to_next.cartpole_swingup'] > 1.0


def test_next_drops_one_critic_evaluation_and_one_policy_pass():
  obs, act = 5, 1
  flops = parts.step_flops(parts.parse_args(ARGS), obs, act)
  dropped = flops['current'] - flops['next']
  critic = N * B * _mlp_flops(obs + act, LAYERS, 1)
  policy = B * _mlp_flops(obs, LAYERS, 2 * act)
  # Matmuls dominate; elementwise work (activations, layer norm, sampling)
  # adds a little on top, far less than a second critic evaluation.
  assert critic + policy <= dropped < 1.5 * critic + policy, (
      dropped, critic, policy)


def test_critic_layers_size_the_critic_alone():
  # What `next` drops grows with the critic's sizes and only the critic's:
  # one target-critic evaluation of N·B pairs at the wider critic, plus the
  # policy pass at the unchanged --layers.
  obs, act, wide = 5, 1, (64, 32)
  flops = parts.step_flops(
      parts.parse_args(ARGS + ['--critic_layers', '64,32']), obs, act)
  dropped = flops['current'] - flops['next']
  critic = N * B * _mlp_flops(obs + act, wide, 1)
  policy = B * _mlp_flops(obs, LAYERS, 2 * act)
  assert critic + policy <= dropped < 1.5 * critic + policy, (
      dropped, critic, policy)


def test_layer_sizes_are_checked(capsys):
  for bad in ('256,,256', '256,0', 'wide'):
    try:
      parts.parse_args(['--critic_layers', bad])
    except SystemExit as e:
      assert e.code == 2
    else:
      raise AssertionError(f'--critic_layers {bad!r} was accepted')
    err = capsys.readouterr().err
    assert '--critic_layers' in err and repr(bad) in err, err


def test_unknown_task_is_refused(capsys):
  assert parts.main(['--tasks', 'humanoid_run']) == 2
  assert 'humanoid_run' in capsys.readouterr().err
