"""The distributed MPO program.

            ┌── counter (global counts, checkpointed) ◄── every node
actors ×N ──┤ env → policy (CPU) → n-step adder ──► replay (Reverb table)
            └── learner.get_variables (every actor_update_period steps)
evaluator ─ mean action, return vs global env steps          │
learner (accelerator if any) ◄── Reverb batches ◄────────────┘
limiter ─ at the env-step budget: learner finish + checkpoint, final eval, stop
"""

from __future__ import annotations

import os
from typing import Optional

from tandem.agents.core import xla_flags
from tandem.agents.envs import environments
from tandem.agents.nodes import counter_node
from tandem.agents.replay import layouts
from tandem.agents.nodes import replay_node
from tandem.agents.nodes import acting
from tandem.agents.mpo import learner as learner_lib
from tandem.agents.nodes import learner_node
from tandem.launch.config import TrainConfig
from tandem.launch.programs import Program

# Actors and evaluator never see an accelerator: JAX would otherwise reserve
# most of the GPU's memory in every one of their processes. They also get one
# BLAS thread: their matrix-vector products are tiny, and OpenBLAS's second
# thread spin-waits after each one, taking a core from the environment
# (halved actor throughput in bench/actor.py).
CPU_ONLY = {'CUDA_VISIBLE_DEVICES': '', 'JAX_PLATFORMS': 'cpu',
            'OPENBLAS_NUM_THREADS': '1', 'OMP_NUM_THREADS': '1',
            'MKL_NUM_THREADS': '1'}
CPU_GROUPS = ('replay', 'counter', 'actor', 'evaluator', 'limiter')


def node_names(num_actors: int) -> list[str]:
  """The program's nodes, as their crash reports and stop markers name
  them (`build_program` adds one node per name, in these groups)."""
  return (['replay', 'counter', 'learner', 'evaluator', 'limiter'] +
          [f'actor_{i}' for i in range(num_actors)])


def env_dims(env_name: str) -> learner_lib.Dims:
  env = environments.make_environment(env_name, seed=0)
  dims = environments.env_dims(env)
  env.close()
  return dims


def replay_tables(tc: TrainConfig) -> tuple:
  """The replay node's tables (layouts.TableSpec): one, of every
  transition, at the run's sample-to-insert ratio."""
  return (layouts.TableSpec(
      layouts.TABLE, max_size=tc.replay_max_size, min_size=tc.replay_min_size,
      samples_per_insert=tc.samples_per_insert,
      error_buffer=tc.replay_error_buffer),)


def build_program(tc: TrainConfig, run_dir: str, resume: bool = False, *,
                  segment: int = 1,
                  algorithm=learner_node.mpo_algorithm,
                  evaluator_node_cls=acting.EvaluatorNode,
                  window_steps: bool = False, kind: str = 'mpo',
                  tables: Optional[tuple] = None):
  """The program above. The adversarial program (launch/ail.py) is this
  program with its own learner algorithm, evaluator node, replay rows that
  keep every step of the n-step sum (`window_steps`) and replay tables
  (`tables`, layouts.TableSpec; default `replay_tables(tc)`; actors write
  each row to all of them). segment: which launch of the run this is (1
  first; actors and the evaluator seed from it)."""
  import launchpad as lp
  dims = env_dims(tc.env)
  layout = layouts.layout_for(dims.observation, dims.action, tc.mpo.n_step,
                             window_steps)
  specs = replay_tables(tc) if tables is None else tables
  names = tuple(spec.name for spec in specs)

  def replay_tables_fn():
    return [layouts.table_of(layout, spec) for spec in specs]

  program = lp.Program(name=f'tandem-{kind}-{tc.name}')
  with program.group('replay'):
    replay_h = program.add_node(replay_node.ReplayNode(
        replay_tables_fn, run_dir, tc.replay_checkpoints,
        tc.replay_checkpoint_period_s))
  with program.group('counter'):
    counter = program.add_node(lp.CourierNode(
        counter_node.CounterNode, run_dir, tc.env_step_budget, resume,
        tc.checkpoint_period_s))
  with program.group('learner'):
    learner = program.add_node(lp.CourierNode(
        learner_node.LearnerNode, tc, dims, replay_h, counter, run_dir,
        resume, algorithm=algorithm))
  with program.group('actor'):
    for i in range(tc.num_actors):
      program.add_node(lp.CourierNode(
          acting.ActorNode, tc, i, replay_h, counter, learner, run_dir,
          window_steps, segment, names))
  with program.group('evaluator'):
    evaluator = program.add_node(lp.CourierNode(
        evaluator_node_cls, tc, counter, learner, run_dir, segment))
  with program.group('limiter'):
    program.add_node(lp.CourierNode(
        counter_node.StepsLimiter, counter, learner, evaluator,
        tc.env_step_budget, run_dir, tc.final_eval_episodes))
  return program


def local_resources(launch_type: str) -> dict:
  """Per-group process settings for local_mp (local_mt has one process)."""
  if launch_type != 'local_mp':
    return {}
  from launchpad.nodes.python.local_multi_processing import PythonProcess
  # TANDEM_NODE names each process's group, so the launcher can say which
  # node died first (supervision.DeathWatch). The learner's process starts
  # with the XLA flags of agents/core/xla_flags.py added to this one's.
  learner = {'XLA_FLAGS': xla_flags.learner_flags(
      os.environ.get('XLA_FLAGS', ''))}
  return {g: PythonProcess(env={**(CPU_ONLY if g in CPU_GROUPS else learner),
                                'TANDEM_NODE': g})
          for g in CPU_GROUPS + ('learner',)}


def checkpoint_mismatch(tc: TrainConfig, metadata: dict) -> Optional[str]:
  """Why a checkpoint cannot resume under `tc` beyond its tree (which
  learner_template checks), or None: nothing for MPO."""
  del tc, metadata
  return None


def learner_template(tc: TrainConfig) -> learner_lib.LearnerState:
  """A fresh learner state: what a checkpoint of this run restores into."""
  return learner_lib.init(tc.mpo, env_dims(tc.env), tc.seed)


def policy_of(cfg: TrainConfig, state: learner_lib.LearnerState):
  return learner_lib.acting_policy(cfg.mpo, state)


PROGRAM = Program(
    command='train', config_class=TrainConfig, build=build_program,
    learner_template=learner_template, policy_of=policy_of,
    checkpoint_mismatch=checkpoint_mismatch, local_resources=local_resources,
    node_names=node_names)
