"""The adversarial program: under test_mt through the learner's handle, and
under local_mp as a newcomer runs it (finish, resume, collect-demos)."""

import json
import os
import shutil
import tempfile
import time

from absl.testing import absltest
import launchpad as lp
import numpy as np

from tandem.agents.ail import demonstrations
from tandem.agents.ail import learner as ail_learner
from tandem.agents.core import checkpointing
from tandem.agents.runtime import logs
from tandem.agents.core import schedules
from tandem.configs import ail as named
from tandem.launch import ail
from tandem.launch import config as config_lib
from tandem.launch import horizons
from tests import no_gl
from tests.integration.conftest import (processes_mentioning, run_tandem,
                                        tensorboard_matches_csv)
from tests.integration.demo_data import write_cartpole_demos, write_demos

ROW_COUNTS = ('env_steps', 'learner_steps', 'discriminator_steps', 'round',
              'elapsed_s')


class AILProgramTest(absltest.TestCase):

  def test_learner_runs_rounds_through_its_handle(self):
    run_dir = tempfile.mkdtemp(prefix='tandem-ail-mt-')
    self.addCleanup(shutil.rmtree, run_dir, ignore_errors=True)
    demos = write_cartpole_demos(os.path.join(run_dir, 'demos.npz'),
                                 episodes=1)
    tc = config_lib.apply_overrides(named.tiny(), {
        'env_step_budget': 10**9, 'runs_root': run_dir, 'demos': demos})
    program = ail.build_program(tc, run_dir)
    for group in ('learner', 'limiter', 'evaluator'):
      program.groups[group][0].disable_run()
    learner = program.groups['learner'][0].create_handle()
    counter = program.groups['counter'][0].create_handle()
    evaluator = program.groups['evaluator'][0].create_handle()
    before_launch = time.monotonic()
    lp.launch(program, launch_type='test_mt', test_case=self)
    learner, counter, evaluator = (learner.dereference(),
                                   counter.dereference(),
                                   evaluator.dereference())
    d, g = (tc.ail.discriminator_steps_per_round,
            tc.ail.generator_steps_per_round)
    k = tc.mpo.sgd_steps_per_call
    calls_per_round = d // tc.ail.discriminator_steps_per_call + g // k
    seen = []
    counter.get_counts()  # the counter node is up, its clock running
    loop_start = time.monotonic()
    for _ in range(2 * calls_per_round):
      self.assertIsNotNone(learner.step(60.0), 'no batch from replay')
      seen.append(counter.get_counts())
    counts = counter.get_counts()
    self.assertEqual(counts['discriminator_steps'], 2 * d)
    self.assertEqual(counts['learner_steps'], 2 * g)
    self.assertEqual(counts['rounds'], 2)
    # No round resets a count or the clock.
    for key in ('env_steps', 'learner_steps', 'discriminator_steps',
                'rounds', 'elapsed_s'):
      values = [c[key] for c in seen]
      self.assertEqual(values, sorted(values), key)
    # The clock behind every rate runs through both phases: it started
    # before the loop (the counter node started first), so it has counted
    # at least the loop's wall time, and at most the time since launch.
    loop_s = time.monotonic() - loop_start
    elapsed = counter.get_counts()['elapsed_s']
    self.assertGreaterEqual(elapsed, loop_s)
    self.assertLessEqual(elapsed, time.monotonic() - before_launch)
    # The evaluator scores its episodes with the learner's discriminator.
    row = evaluator.evaluate_now(1)
    self.assertIn('learned_return', row)
    self.assertTrue(np.isfinite(row['learned_return']))
    for name in ('learner', 'discriminator', 'evaluator'):
      rows = logs.read_csv(os.path.join(run_dir, 'logs', f'{name}.csv'))
      self.assertTrue(rows, name)
      for r in rows:
        for key in ROW_COUNTS:
          self.assertIn(key, r, f'{name}.csv lacks {key}')
    disc_rows = logs.read_csv(os.path.join(run_dir, 'logs',
                                           'discriminator.csv'))
    self.assertEqual([int(r['discriminator_steps']) for r in disc_rows],
                     list(range(1, 2 * d + 1)))


def test_local_mp_run_resume_and_collect_demos(runs_root, tmp_path):
  demos = write_cartpole_demos(str(tmp_path / 'demos.npz'), episodes=1)
  # Annealed rates in both phases and an annealed behaviour-cloning weight:
  # each row of both launches must show the value at its global step. The
  # discriminator's over the run: a horizon the launch sets from the budget.
  lr = ['--ail.discriminator_optimizer.schedule=linear',
        '--ail.discriminator_optimizer.final_fraction=0.1',
        '--ail.schedule_horizon=0',
        '--mpo.policy_optimizer.schedule=linear',
        '--mpo.policy_optimizer.final_fraction=0.1',
        '--mpo.schedule_horizon=2000',
        '--ail.bc_weight=0.5', '--ail.bc_decay_steps=2000',
        # Absorbing states on a task that never terminates: the indicator
        # column goes through every node, checkpoint and resume.
        '--ail.absorbing_states=on',
        # The discriminator draws from a second table of the newest 64
        # transitions, which is checkpointed and restored with the first.
        '--ail.discriminator_window=64']
  r1 = run_tandem(['train-ail', '--config', 'configs/ail.py:tiny',
                   '--demos', demos, '--launch', 'local_mp', '--runs_root',
                   runs_root, '--name', 'ail', '--env_step_budget=1500',
                   '--tensorboard=true'] + lr)
  assert r1.returncode == 0, r1.stdout[-3000:] + r1.stderr[-3000:]
  assert 'over the time the run has run' in r1.stdout
  run_dir = os.path.join(runs_root, 'ail')
  for label in ('discriminator', 'learner'):
    tensorboard_matches_csv(run_dir, label)
  first = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  assert first['rounds'] > 0 and first['discriminator_steps'] > 0
  rows1 = logs.read_csv(os.path.join(run_dir, 'logs', 'discriminator.csv'))
  assert processes_mentioning(run_dir) == []
  stored = json.load(open(os.path.join(run_dir, 'config.json')))
  assert stored['ail']['absorbing_states'] == 'on'
  horizon = stored['ail']['schedule_horizon']
  assert horizon == round(horizons.expected_updates(
      config_lib.from_dict(stored))['ail']) > 0
  # No terminal transitions on either side: D of the absorbing transition
  # is logged, and no absorbing row enters the loss.
  assert all(0 < float(r['d_absorbing']) < 1 for r in rows1)
  assert all(float(r['agent_terminal_fraction']) == 0 for r in rows1)
  items = json.load(open(os.path.join(run_dir, 'checkpoints',
                                      'replay_checkpoint.json')))['items']
  assert items['recent'] == 64 and items['transitions'] > 64, items

  r2 = run_tandem(['train-ail', '--resume', run_dir, '--launch', 'local_mp',
                   '--env_step_budget=3000'])
  assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-3000:]
  # The resume keeps the horizon its run was created with.
  assert json.load(open(os.path.join(run_dir, 'config.json')))['ail'][
      'schedule_horizon'] == horizon
  second = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  restored = json.load(open(os.path.join(run_dir, 'checkpoints',
                                         'replay_restored.json')))['items']
  # Actors may insert before the record is written: the agent table can
  # only have grown; the window stays full at 64.
  assert restored['recent'] == 64, restored
  assert restored['transitions'] >= items['transitions'], (restored, items)
  # The first launch's final evaluation is kept beside its node logs.
  kept = os.path.join(run_dir, 'nodes', 'segment-1', 'final.json')
  assert json.load(open(kept))['counts'] == first
  for key in ('env_steps', 'learner_steps', 'discriminator_steps', 'rounds',
              'elapsed_s'):
    assert second[key] > first[key], key
  assert second['env_steps'] >= 3000
  # Rounds are exactly what the round plan makes of the two step counts,
  # in each launch: none lost or counted twice across the resume.
  plan = ail_learner.RoundPlan(named.tiny().ail.discriminator_steps_per_round,
                               named.tiny().ail.generator_steps_per_round)
  for counts in (first, second):
    assert counts['rounds'] == plan.position(
        counts['discriminator_steps'], counts['learner_steps']).round, counts
  rows = logs.read_csv(os.path.join(run_dir, 'logs', 'discriminator.csv'))
  resumed = rows[len(rows1):]
  assert resumed, 'no discriminator rows after resume'
  # The discriminator's schedule continues from the global count rather
  # than restarting at its initial rate.
  step = int(resumed[0]['discriminator_steps'])
  assert step > int(rows1[-1]['discriminator_steps'])
  want = float(schedules.value('linear', 3e-4, 0.1, step - 1, horizon))
  assert np.isclose(resumed[0]['learning_rate_discriminator'], want,
                    rtol=1e-5)
  # Every row of both launches: each value is the one of an uninterrupted
  # run at that row's global step (the count before the step).
  policy_lr = named.tiny().mpo.policy_optimizer.learning_rate
  generator_rows = logs.read_csv(os.path.join(run_dir, 'logs', 'learner.csv'))
  for r in rows:
    t = int(r['discriminator_steps']) - 1
    assert np.isclose(r['learning_rate_discriminator'], float(
        schedules.value('linear', 3e-4, 0.1, t, horizon)), rtol=1e-5), r
  for r in generator_rows:
    t = int(r['learner_steps']) - 1
    assert np.isclose(r['learning_rate_policy'], float(
        schedules.value('linear', policy_lr, 0.1, t, 2000)), rtol=1e-5), r
    assert np.isclose(r['bc_weight'], 0.5 * max(0.0, 1 - t / 2000),
                      rtol=1e-5), r
  assert int(generator_rows[-1]['learner_steps']) > 2 * int(
      generator_rows[0]['learner_steps'])
  evals = logs.read_csv(os.path.join(run_dir, 'logs', 'evaluator.csv'))
  assert all('learned_return' in r and 'round' in r for r in evals)
  # One x-axis across the resume: the learner's restored counts overwrote
  # the counter's, so no column goes backwards in any log; nor does the
  # wall clock (one restarted at 0 would put the resume's rows behind).
  for name, strict in (('discriminator', 'discriminator_steps'),
                       ('learner', 'learner_steps')):
    table = logs.read_csv(os.path.join(run_dir, 'logs', f'{name}.csv'))
    steps = [int(r[strict]) for r in table]
    assert all(a < b for a, b in zip(steps, steps[1:])), name
    for key in ROW_COUNTS:
      values = [r[key] for r in table]
      assert values == sorted(values), (name, key)
  # The final line's throughput is over the whole run's wall time.
  fps = float(r2.stdout.split('throughput: ')[1].split()[0])
  assert abs(fps - second['env_steps'] / second['elapsed_s']) < 0.1
  history = [json.loads(line) for line in
             open(os.path.join(run_dir, 'config_history.jsonl'))]
  assert history[-1]['changed'] == {
      'env_step_budget': {'from': 1500, 'to': 3000}}
  assert processes_mentioning(run_dir) == []

  out = str(tmp_path / 'collected.npz')
  r3 = run_tandem(['collect-demos', '--run', run_dir, '--episodes', '1',
                   '--out', out, '--seed', '3'])
  assert r3.returncode == 0, r3.stdout[-3000:] + r3.stderr[-3000:]
  assert 'return mean' in r3.stdout
  loaded = demonstrations.load_for_environment(out, 'cartpole:swingup')
  assert loaded.num_episodes == 1 and loaded.num_transitions == 1000
  r4 = run_tandem(['plot', run_dir])
  assert r4.returncode == 0, r4.stderr[-2000:]
  assert os.path.getsize(os.path.join(run_dir, 'learning_curve.png')) > 0
  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints',
                                             'learner'))
  # The plan its rounds were counted under, for a later resume to check.
  assert checkpointing.read_metadata(latest)['round_plan'] == \
      ail_learner.plan_record(named.tiny().ail)
  # The generator as the run left it, drawn from the checkpoint the run
  # wrote: two episodes of 4 steps, each at steps 0, 2 and 4.
  gif = tmp_path / 'generator.gif'
  r5 = run_tandem(['render', run_dir, '--steps', '4', '--every', '2',
                   '--episodes', '2', '--out', str(gif)],
                  env={'MUJOCO_GL': ''})  # '' lets render choose
  if r5.returncode == 2 and 'no OpenGL back end renders' in r5.stderr:
    no_gl(r5.stderr[-500:])
  assert r5.returncode == 0, r5.stderr[-2000:]
  assert os.path.basename(latest) in r5.stdout
  # The run's file holds one episode, two were asked for: the agent is
  # drawn alone, and the output says why.
  assert 'the agent alone, not beside the expert' in r5.stdout
  assert 'hold 1 episodes' in r5.stdout
  from PIL import Image
  with Image.open(gif) as image:
    assert image.n_frames == 2 * 3 and image.size[0] == 320


if __name__ == '__main__':
  absltest.main()


def test_a_terminating_gym_task_runs_with_absorbing_states(runs_root,
                                                           tmp_path):
  """gym:Hopper-v5 ends an episode when the hopper falls: 'auto' turns the
  absorbing states on, says so, and both sides' terminal transitions reach
  the discriminator through every node."""
  demos = write_demos(str(tmp_path / 'hopper.npz'), 'gym:Hopper-v5',
                      episodes=4)
  r = run_tandem(['train-ail', '--config', 'configs/ail.py:tiny',
                  '--env', 'gym:Hopper-v5', '--demos', demos,
                  '--launch', 'local_mp', '--runs_root', runs_root,
                  '--name', 'hopper', '--env_step_budget=1500'])
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "ail.absorbing_states=auto turns DAC's absorbing states" in r.stdout
  run_dir = os.path.join(runs_root, 'hopper')
  rows = logs.read_csv(os.path.join(run_dir, 'logs', 'discriminator.csv'))
  assert rows
  assert any(float(row['agent_terminal_fraction']) > 0 for row in rows)
  assert any(float(row['expert_terminal_fraction']) > 0 for row in rows)
  assert all(0 < float(row['d_absorbing']) < 1 for row in rows)
  generator = logs.read_csv(os.path.join(run_dir, 'logs', 'learner.csv'))
  assert generator and all(float(row['finite']) == 1.0
                           for row in generator)
  final = json.load(open(os.path.join(run_dir, 'final.json')))
  assert final['counts']['env_steps'] >= 1500
  assert processes_mentioning(run_dir) == []
