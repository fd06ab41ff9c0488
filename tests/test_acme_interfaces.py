"""Tandem's runtime parts speak Acme's interfaces (acme.core, acme.specs)."""

import acme
from acme import core
from acme import specs
from acme.utils import counting as acme_counting
from acme.utils import loggers as acme_loggers
import jax
import numpy as np
import pytest

from tandem.agents.envs import environments
from tandem.agents.mpo import actor as actor_lib
from tandem.agents.mpo import learner as learner_lib
from tandem.agents.mpo import networks
from tandem.agents.nodes.learner_node import LearnerNode
from tandem.configs import mpo as named
from tests.fakes import UncontactedReplay


class _RecordingAdder:
  def __init__(self):
    self.firsts, self.steps = 0, 0

  def add_first(self, timestep):
    assert timestep.first()
    self.firsts += 1

  def add(self, action, next_timestep):
    assert np.all(np.abs(action) <= 1)
    self.steps += 1


class _Source(core.VariableSource):
  def __init__(self, params):
    self.params, self.calls = params, 0

  def get_variables(self, names):
    self.calls += 1
    return [self.params for _ in names]


def _policy(obs_dim, action_dim, seed=0):
  cfg = named.tiny().mpo
  return cfg, networks.init_policy(jax.random.PRNGKey(seed), obs_dim,
                                   action_dim, cfg.policy_layers)


def test_tandem_actor_runs_in_acme_environment_loop():
  env = environments.make_environment('cartpole:balance', seed=0)
  spec = specs.make_environment_spec(env)
  cfg, params = _policy(spec.observations.shape[0], spec.actions.shape[0])
  adder, source = _RecordingAdder(), _Source(params)
  actor = actor_lib.Actor(cfg, params, seed=0, variable_source=source,
                          update_period=500, adder=adder)
  assert isinstance(actor, core.Actor)
  counter = acme_counting.Counter()
  loop = acme.EnvironmentLoop(env, actor, counter=counter,
                              logger=acme_loggers.NoOpLogger())
  loop.run(num_episodes=2)
  counts = counter.get_counts()
  assert counts['episodes'] == 2 and counts['steps'] == 2000
  # The loop's observe calls reach the adder; update() refreshes from the
  # VariableSource every update_period steps.
  assert adder.firsts == 2 and adder.steps == 2000
  assert source.calls == 2000 // 500


def _learner_node(tmp_path):
  tc = named.tiny()
  dims = learner_lib.Dims(5, 1)
  return (LearnerNode(tc, dims, UncontactedReplay(), None, str(tmp_path)), tc,
          dims)


def test_learner_node_is_a_variable_source_and_saveable(tmp_path):
  node, tc, dims = _learner_node(tmp_path)
  assert isinstance(node, core.VariableSource)
  assert isinstance(node, core.Saveable)
  (policy,) = node.get_variables(['policy'])
  want = learner_lib.init(tc.mpo, dims, seed=tc.seed).policy
  jax.tree_util.tree_map(np.testing.assert_array_equal, policy, want)
  with pytest.raises(KeyError, match='policy'):
    node.get_variables(['critic'])
  # An actor fetching through the interface acts with those parameters.
  actor = actor_lib.Actor(tc.mpo, policy, seed=0, variable_source=node,
                          deterministic=True)
  actor.update(wait=True)
  obs = np.linspace(-1, 1, 5).astype(np.float32)
  dist = networks.apply_policy(want, obs,
                               init_scale=tc.mpo.policy_init_scale,
                               min_scale=tc.mpo.policy_min_scale)
  np.testing.assert_allclose(actor.select_action(obs),
                             np.clip(dist.mean, -1, 1), rtol=1e-5, atol=1e-6)
  # Saveable: a state from another seed goes in and its policy is served.
  saved = node.save()
  other = learner_lib.to_numpy(learner_lib.init(tc.mpo, dims, seed=7))
  node.restore(other)
  np.testing.assert_array_equal(
      node.get_variables(['policy'])[0]['mean']['w'],
      other.policy['mean']['w'])
  node.restore(saved)
  np.testing.assert_array_equal(
      node.get_variables(['policy'])[0]['mean']['w'], want['mean']['w'])
  with pytest.raises(ValueError, match='structure'):
    node.restore({'policy': saved.policy})


@pytest.mark.parametrize('name', ['cartpole:swingup', 'walker:walk',
                                  'gym:Pendulum-v1'])
def test_environment_spec_matches_the_learner_dims(name):
  env = environments.make_environment(name, seed=0)
  spec = specs.make_environment_spec(env)
  dims = environments.env_dims(env)
  env.close()
  assert isinstance(spec, specs.EnvironmentSpec)
  assert spec.observations.shape == (dims.observation,)
  assert spec.actions.shape == (dims.action,)
  np.testing.assert_array_equal(spec.actions.minimum, -1)
  np.testing.assert_array_equal(spec.actions.maximum, 1)
  assert spec.observations.dtype == np.float32


def test_acme_doc_snippet_runs(capsys):
  import os
  import re
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  text = open(os.path.join(root, 'docs', 'acme.md')).read()
  section = text.split("## Using Tandem's parts from Acme", 1)[1]
  code = re.search(r'```python\n(.*?)```', section, re.S).group(1)
  exec(compile(code, 'docs/acme.md', 'exec'), {})
  out = capsys.readouterr().out
  assert "'episodes': 1" in out and "'steps': 1000" in out


@pytest.mark.parametrize('acting', ['online', 'target'])
def test_adversarial_learner_node_serves_policy_and_discriminator(tmp_path,
                                                                  acting):
  from tandem.agents.nodes.ail_learner_node import ail_algorithm
  from tandem.configs import ail as ail_named
  from tandem.launch import ail as ail_program
  from tandem.launch import config as config_lib
  from tests.integration.demo_data import write_cartpole_demos
  demos = write_cartpole_demos(str(tmp_path / 'demos.npz'), episodes=1)
  tc = config_lib.apply_overrides(ail_named.tiny(), {
      'demos': demos, 'mpo.acting_policy': acting})
  node = LearnerNode(tc, learner_lib.Dims(5, 1), UncontactedReplay(), None,
                     str(tmp_path / 'run'), algorithm=ail_algorithm)
  assert isinstance(node, core.VariableSource)
  # The generator's online policy one step on from its target.
  state = node.save()
  moved = learner_lib.init(tc.mpo, learner_lib.Dims(5, 1), seed=7).policy
  node.restore(state._replace(generator=state.generator._replace(
      policy=jax.device_get(moved))))
  policy, (params, normalizer) = node.get_variables(['policy',
                                                     'discriminator'])
  state = node.save()
  want = (state.generator.target_policy if acting == 'target'
          else state.generator.policy)
  assert not np.array_equal(state.generator.policy['mean']['w'],
                            state.generator.target_policy['mean']['w'])
  np.testing.assert_array_equal(policy['mean']['w'], want['mean']['w'])
  np.testing.assert_array_equal(
      ail_program.policy_of(tc, state)['mean']['w'], want['mean']['w'])
  np.testing.assert_array_equal(params['d']['head']['w'],
                                state.discriminator.params['d']['head']['w'])
  assert normalizer.mean.shape == (5,)
