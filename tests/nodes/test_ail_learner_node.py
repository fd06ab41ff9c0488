"""The adversarial learner's accounting (agents/nodes/ail_learner_node.py):
which update call comes next, and what each adds to the global counts,
through whole rounds and from a state restored mid-round. The calls' step
counters are advanced as an update advances them; the updates themselves
are not run (their maths is tests/ail/test_learner.py's)."""

import pytest

from tandem.agents.core.specs import Dims
from tandem.agents.nodes.ail_learner_node import ail_algorithm
from tandem.configs import ail as ail_named
from tandem.launch import config as config_lib
from tests.integration.demo_data import write_cartpole_demos


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
  demos = write_cartpole_demos(
      str(tmp_path_factory.mktemp('demos') / 'demos.npz'), episodes=1)
  tc = config_lib.apply_overrides(ail_named.tiny(), {
      'demos': demos, 'ail.generator_steps_per_round': '4',
      'ail.discriminator_steps_per_round': '2',
      'ail.discriminator_steps_per_call': '1', 'mpo.sgd_steps_per_call': '2'})
  return tc, ail_algorithm(tc, Dims(5, 1))


def _after(state, update):
  """`state` with the step counter of `update`'s kind advanced by one call."""
  if update.count == 'discriminator_steps':
    d = state.discriminator
    return state._replace(discriminator=d._replace(
        steps=d.steps + update.steps_per_call))
  g = state.generator
  return state._replace(generator=g._replace(
      steps=g.steps + update.steps_per_call))


def _run(algorithm, state, calls):
  """Makes `calls` update calls from `state`: (state, their logs, the summed
  increments)."""
  logs, totals = [], {}
  for _ in range(calls):
    i, note = algorithm.next_update(state)
    update = algorithm.updates[i]
    state = _after(state, update)
    logs.append(update.log)
    for key, value in algorithm.increments(note, state, update).items():
      totals[key] = totals.get(key, 0) + value
  return state, logs, totals


def test_calls_follow_the_round_plan_and_their_increments_add_up(setup):
  tc, algorithm = setup
  # Per round: 2 discriminator calls of 1 step, then 2 generator calls of 2.
  state, logs, totals = _run(algorithm, algorithm.state, 3 * 4)
  assert logs == (['discriminator'] * 2 + ['learner'] * 2) * 3
  assert totals == {'discriminator_steps': 6, 'learner_steps': 12,
                    'rounds': 3}
  # What the state owns (what a restore writes back to the counter) is what
  # the increments summed to.
  assert algorithm.owned_counts(state) == totals
  assert algorithm.checkpoint_step(state) == 12


def test_a_state_restored_mid_round_finishes_that_round_first(setup):
  tc, algorithm = setup
  # Two calls into the second round: its discriminator phase is done.
  mid, _, before = _run(algorithm, algorithm.state, 4 + 2)
  assert before == {'discriminator_steps': 4, 'learner_steps': 4,
                    'rounds': 1}
  _, logs, more = _run(algorithm, mid, 2 + 4)
  assert logs == ['learner'] * 2 + ['discriminator'] * 2 + ['learner'] * 2
  assert more == {'learner_steps': 8, 'discriminator_steps': 2, 'rounds': 2}
  # A round is counted once, by the call that completes it.
  _, logs, one = _run(algorithm, mid, 1)
  assert logs == ['learner'] and one['rounds'] == 0


def test_it_serves_the_policy_and_the_discriminator_and_records_its_plan(
    setup):
  tc, algorithm = setup
  served = algorithm.variables(algorithm.state)
  assert list(served) == ['policy', 'discriminator']
  assert algorithm.checkpoint_metadata['round_plan'] == {
      'discriminator_steps_per_round': 2, 'generator_steps_per_round': 4}
  assert algorithm.checkpoint_metadata['env'] == tc.env
