"""Program wiring: groups, and which nodes may see an accelerator."""

from tandem.agents.core import xla_flags
from tandem.configs import mpo as named
from tandem.launch import config as config_lib
from tandem.launch import mpo


def test_cpu_only_groups_hide_accelerators_and_learner_does_not(monkeypatch):
  monkeypatch.delenv('XLA_FLAGS', raising=False)  # the launcher sets none
  res = mpo.local_resources('local_mp')
  for group in ('actor', 'evaluator', 'replay', 'counter', 'limiter'):
    assert res[group].env['CUDA_VISIBLE_DEVICES'] == ''
    assert res[group].env['JAX_PLATFORMS'] == 'cpu'
    assert res[group].env['OPENBLAS_NUM_THREADS'] == '1'
    assert res[group].env['TANDEM_NODE'] == group
  # The learner takes the accelerator if any: its name and its XLA flags.
  assert res['learner'].env == {'TANDEM_NODE': 'learner',
                                'XLA_FLAGS': xla_flags.GPU_COMMAND_BUFFERS}
  for group in ('actor', 'evaluator', 'replay', 'counter', 'limiter'):
    assert 'XLA_FLAGS' not in res[group].env
  assert mpo.local_resources('local_mt') == {}


def test_the_learner_process_keeps_the_launchers_xla_flags(monkeypatch):
  monkeypatch.setenv('XLA_FLAGS', '--xla_dump_to=/nowhere')
  env = mpo.local_resources('local_mp')['learner'].env
  assert env['XLA_FLAGS'] == \
      f'--xla_dump_to=/nowhere {xla_flags.GPU_COMMAND_BUFFERS}'
  # A choice of command buffers of its own is kept as it is.
  own = '--xla_gpu_enable_command_buffer=FUSION'
  monkeypatch.setenv('XLA_FLAGS', own)
  assert mpo.local_resources('local_mp')['learner'].env['XLA_FLAGS'] == own


def test_program_has_the_designed_nodes(tmp_path):
  tc = config_lib.apply_overrides(named.tiny(), {'num_actors': 3})
  program = mpo.build_program(tc, str(tmp_path))
  sizes = {g: len(nodes) for g, nodes in program.groups.items()}
  assert sizes == {'replay': 1, 'counter': 1, 'learner': 1, 'actor': 3,
                   'evaluator': 1, 'limiter': 1}
  # The names crash reports and stop markers use: one per node, by group.
  names = mpo.node_names(tc.num_actors)
  assert len(set(names)) == len(names)
  assert {g: sum(n.rsplit('_', 1)[0] == g for n in names)
          for g in sizes} == sizes
