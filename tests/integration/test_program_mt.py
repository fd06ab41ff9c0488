"""The MPO program under test_mt: drive the learner through its handle."""

import os
import shutil
import tempfile
import time

from absl.testing import absltest
import jax
import launchpad as lp
import numpy as np

from tandem.agents.replay import layouts
from tandem.launch import config as config_lib
from tandem.launch import mpo
from tandem.configs import mpo as named


class ProgramTest(absltest.TestCase):

  def test_learner_driven_through_handle_sees_replay_and_counts_grow(self):
    run_dir = tempfile.mkdtemp(prefix="tandem-mt-")
    self.addCleanup(shutil.rmtree, run_dir, ignore_errors=True)
    tc = config_lib.apply_overrides(named.tiny(), {
        'env_step_budget': 10**9, 'runs_root': run_dir})
    program = mpo.build_program(tc, run_dir)
    learner_node = program.groups['learner'][0]
    learner_node.disable_run()
    program.groups['limiter'][0].disable_run()
    program.groups['evaluator'][0].disable_run()
    learner = learner_node.create_handle()
    counter = program.groups['counter'][0].create_handle()
    replay_h = program.groups['replay'][0].create_handle()

    lp.launch(program, launch_type='test_mt', test_case=self)
    learner, counter, client = (learner.dereference(), counter.dereference(),
                                replay_h.dereference())

    def table_size():
      return client.server_info()[layouts.TABLE].current_size

    deadline = time.time() + 120
    while table_size() < tc.replay_min_size and time.time() < deadline:
      time.sleep(0.5)
    size_before = table_size()
    assert size_before >= tc.replay_min_size

    counts = None
    for _ in range(5):
      counts = learner.step(30.0)
      assert counts is not None, 'learner got no batch from replay'
    k = tc.mpo.sgd_steps_per_call
    assert learner.get_steps() == 5 * k
    assert counter.get_counts()['learner_steps'] == 5 * k
    # Actors keep acting as learning makes room under the rate limiter.
    deadline = time.time() + 60
    while table_size() <= size_before and time.time() < deadline:
      learner.step(5.0)
    assert table_size() > size_before
    assert counter.get_counts()['env_steps'] >= tc.replay_min_size
    # The published policy changed from its initial value.
    initial = jax.tree_util.tree_leaves(mpo.learner_template(tc).policy)
    published = jax.tree_util.tree_leaves(learner.get_variables())
    assert len(published) == len(initial) > 0
    assert any(not np.array_equal(a, np.asarray(b))
               for a, b in zip(published, initial))
    assert os.path.isdir(os.path.join(run_dir, 'logs'))


if __name__ == '__main__':
  absltest.main()
