"""The Vertex AI job Tandem builds: the cloud block's checks, the placement of
node groups on worker pools, the CustomJob request, CLUSTER_SPEC, and the
bad input `tandem train --launch vertex_ai` refuses before sending."""

import json
import os

import pytest

from tandem.agents.core.fields import ConfigError
from tandem.configs import mpo as named
from tandem.launch import cli
from tandem.launch import config as config_lib
from tandem.launch.cloud import cluster
from tandem.launch.cloud import config as cloud_config
from tandem.launch.cloud import placement
from tandem.launch.cloud import request
from tandem.launch.errors import UsageError
from tandem.launch import mpo

CLOUD = ['--cloud.project=my-project', '--cloud.region=us-central1',
         '--cloud.bucket=gs://my-bucket',
         '--cloud.image=europe-docker.pkg.dev/p/r/tandem:1',
         '--runs_root=/gcs/my-bucket/runs']
TRAIN = ['train', '--config', 'configs/mpo.py:tiny', '--launch', 'vertex_ai']
DRY = ['--cloud.dry_run=true']


def _main(capsys, *argv):
  rc = cli.main(list(argv))
  out = capsys.readouterr()
  return rc, out.out, out.err


def _dry_request(capsys, *extra):
  rc, out, err = _main(capsys, *TRAIN, *CLOUD, *DRY, *extra)
  assert rc == 0, err
  return json.loads(out.strip().splitlines()[-1])


def test_groups_are_the_programs_groups():
  assert set(placement.GROUPS) == set(mpo.CPU_GROUPS) | {'learner'}


def test_default_placement_packs_six_groups_into_three_pools():
  plan = placement.plan(placement.DEFAULT_POOLS, num_actors=5,
                        actors_per_replica=2)
  assert [len(p.replicas) for p in plan.pools] == [1, 1, 3]
  assert plan.replica(0, 0).nodes == ('replay', 'counter', 'evaluator',
                                      'limiter')
  assert [r.nodes for r in plan.pools[2].replicas] == [
      ('actor_0', 'actor_1'), ('actor_2', 'actor_3'), ('actor_4',)]
  # Every node of the program is placed once.
  placed = [n for r in plan.replicas for n in r.nodes]
  assert sorted(placed) == sorted(mpo.node_names(5))
  assert plan.where('evaluator') == (plan.replica(0, 0), 2)
  assert plan.where('actor_3') == (plan.replica(2, 1), 1)


@pytest.mark.parametrize('pools, words', [
    ('replay;counter;learner;actor;evaluator,limiter', 'at most 4 pools'),
    ('replay,counter,evaluator,limiter,actor;learner', '"actor" alone'),
    ('actor;replay,counter,evaluator,limiter,learner', '"actor" alone'),
    ('replay,counter,evaluator;learner;actor', "missing: ['limiter']"),
    ('replay,counter,evaluator,limiter,replay;learner;actor', 'more than once'),
    ('replay,counter,evaluator,limiter;learner;actor;critic', "['critic']"),
    ('replay,counter,evaluator,limiter;;learner;actor', 'no empty pool'),
])
def test_bad_placements_are_named(pools, words):
  with pytest.raises(ConfigError, match='cloud.pools') as e:
    placement.parse_pools(pools)
  assert words in str(e.value)


@pytest.mark.parametrize('field, value, words', [
    ('project', 'My_Project', 'project id'),
    ('region', 'us central', 'region'),
    ('bucket', 'my-bucket', 'gs://'),
    ('learner_accelerator', 'NVIDIA_RTX', 'NVIDIA_L4'),
    ('learner_accelerator_count', 3, '[1, 2, 4, 8, 16]'),
    ('actors_per_replica', 0, 'integer >= 1'),
    ('local_mount', 'mnt/b', 'absolute path'),
])
def test_cloud_fields_are_checked_by_name(field, value, words):
  with pytest.raises(ConfigError, match=f'cloud.{field}') as e:
    cloud_config.CloudConfig(**{field: value})
  assert words in str(e.value)


def test_the_learner_machine_follows_its_accelerator():
  assert cloud_config.CloudConfig().learner_machine == 'n2-standard-8'
  l4 = cloud_config.CloudConfig(learner_accelerator='NVIDIA_L4')
  assert l4.learner_machine == 'g2-standard-8'
  with pytest.raises(ConfigError, match='cloud.learner_machine_type'):
    cloud_config.CloudConfig(learner_accelerator='NVIDIA_L4',
                             learner_machine_type='n1-standard-8')
  with pytest.raises(ConfigError, match='cloud.learner_machine_type'):
    cloud_config.CloudConfig(learner_accelerator='NVIDIA_H200_141GB')
  # A machine's built-in GPUs and the count asked for must agree.
  with pytest.raises(ConfigError, match='cloud.learner_accelerator_count'):
    cloud_config.CloudConfig(learner_accelerator='NVIDIA_L4',
                             learner_accelerator_count=2,
                             learner_machine_type='g2-standard-8')
  assert cloud_config.CloudConfig(
      learner_accelerator='NVIDIA_L4', learner_accelerator_count=2,
      learner_machine_type='g2-standard-24').learner_machine == 'g2-standard-24'
  assert cloud_config.CloudConfig(
      learner_accelerator='NVIDIA_TESLA_A100', learner_accelerator_count=16,
      learner_machine_type='a2-megagpu-16g').learner_accelerator_count == 16
  with pytest.raises(ConfigError, match='cloud.learner_accelerator_count'):
    cloud_config.CloudConfig(learner_accelerator='NVIDIA_H200_141GB',
                             learner_machine_type='a3-ultragpu-8g')
  # n1 machines take the GPUs attached to them.
  cloud_config.CloudConfig(learner_accelerator='NVIDIA_TESLA_T4',
                           learner_accelerator_count=4,
                           learner_machine_type='n1-standard-16')


def test_cloud_fields_round_trip_and_a_resume_may_change_them():
  from tandem.launch import resuming
  cfg = config_lib.apply_overrides(named.tiny(), {
      'cloud.project': 'my-project', 'cloud.actors_per_replica': '3'})
  again = config_lib.from_dict(json.loads(json.dumps(config_lib.to_dict(cfg))))
  assert again == cfg and again.cloud.actors_per_replica == 3
  moved = config_lib.apply_overrides(cfg, {'cloud.region': 'europe-west4'})
  assert resuming.check_resume_overrides(cfg, moved) == {
      'cloud.region': ('', 'europe-west4')}


def test_dry_run_prints_the_request_with_vertex_ai_rest_names(capsys):
  sent = _dry_request(capsys, '--num_actors=5', '--cloud.actors_per_replica=2',
                      '--cloud.learner_accelerator=NVIDIA_L4',
                      '--cloud.gpu_image=europe-docker.pkg.dev/p/r/gpu:1',
                      '--cloud.network=projects/12/global/networks/tandem',
                      '--cloud.service_account=sa@my-project.iam.gserviceaccount.com')
  assert sent['parent'] == 'projects/my-project/locations/us-central1'
  spec = sent['customJob']['jobSpec']
  pools = spec['workerPoolSpecs']
  assert len(pools) == 3 and [p['replicaCount'] for p in pools] == [1, 1, 3]
  assert pools[1]['machineSpec'] == {'machineType': 'g2-standard-8',
                                     'acceleratorType': 'NVIDIA_L4',
                                     'acceleratorCount': 1}
  for p in (pools[0], pools[2]):  # the accelerator on the learner's pool only
    assert p['machineSpec'] == {'machineType': 'n2-standard-4'}
    assert p['containerSpec']['imageUri'] == 'europe-docker.pkg.dev/p/r/tandem:1'
  assert pools[1]['containerSpec']['imageUri'] == \
      'europe-docker.pkg.dev/p/r/gpu:1'
  for p in pools:  # one entrypoint; each replica finds its own nodes
    assert p['containerSpec']['command'] == ['tandem']
    assert p['containerSpec']['args'] == [
        'replica', '--run_dir', '/gcs/my-bucket/runs/tiny', '--segment', '1']
  assert spec['network'] == 'projects/12/global/networks/tandem'
  assert spec['serviceAccount'].startswith('sa@')
  assert spec['baseOutputDirectory'] == {
      'outputUriPrefix': 'gs://my-bucket/runs/tiny'}


def test_dry_run_writes_nothing(capsys, tmp_path):
  mount = tmp_path / 'bucket'
  (mount / 'runs').mkdir(parents=True)
  _dry_request(capsys, f'--cloud.local_mount={mount}')
  assert list((mount / 'runs').iterdir()) == []


@pytest.mark.parametrize('change, field, words', [
    (['--runs_root=runs'], 'runs_root', 'every replica shares'),
    (['--runs_root=/tmp/runs'], 'runs_root', 'every replica shares'),
    (['--runs_root=/gcs/other-bucket/runs'], 'runs_root',
     'every replica shares'),
    (['--cloud.project='], 'cloud.project', 'for --launch vertex_ai'),
    (['--cloud.region='], 'cloud.region', 'for --launch vertex_ai'),
    (['--cloud.bucket='], 'cloud.bucket', 'for --launch vertex_ai'),
    (['--cloud.image='], 'cloud.image', 'for --launch vertex_ai'),
    (['--cloud.learner_accelerator=NVIDIA_L4'], 'cloud.gpu_image',
     'CPU-only JAX'),
    (['--cloud.learner_accelerator=NVIDIA_L4',
      '--cloud.gpu_image=europe-docker.pkg.dev/p/r/tandem:1'],
     'cloud.gpu_image', 'not the CPU image'),
    (['--cloud.pools=replay;counter;learner;actor;evaluator,limiter'],
     'cloud.pools', 'at most 4 pools'),
])
def test_bad_vertex_ai_input_exits_2_naming_the_field(capsys, change, field,
                                                      words):
  # Without --cloud.dry_run: a check that passed would go on to send, to a
  # closed port on loopback (nothing leaves this machine).
  args = [a for a in CLOUD if not any(
      a.startswith(c.split('=')[0] + '=') for c in change)] + change
  rc, out, err = _main(capsys, *TRAIN, *args,
                       '--cloud.api_endpoint=http://127.0.0.1:9')
  assert rc == 2, (out, err)
  assert f'{field}:' in err and words in err, err
  assert 'Traceback' not in err


def test_demonstrations_must_be_in_the_bucket(capsys):
  rc, _, err = _main(capsys, 'train-ail', '--config', 'configs/ail.py:tiny',
                     '--launch', 'vertex_ai', *CLOUD, *DRY,
                     '--demos', '/tmp/demos.npz')
  assert rc == 2 and 'demos:' in err and '/gcs/my-bucket/' in err, err


def test_cluster_spec_round_trips_and_finds_this_replica():
  plan = placement.plan(placement.DEFAULT_POOLS, 3, 2)
  pools = (('h0:2222',), ('h1:2222',), ('h2:2222', 'h3:2222'))
  spec = cluster.ClusterSpec.parse(cluster.ClusterSpec(pools, 2, 1).to_json())
  assert spec.own_replica(plan).nodes == ('actor_2',)
  with pytest.raises(UsageError, match='CLUSTER_SPEC.*another config'):
    cluster.ClusterSpec(pools[:2], 1, 0).own_replica(plan)


def test_a_node_address_is_its_replica_host_and_port_plus_its_slot(
    monkeypatch):
  pools = (('h0:2222',), ('h1:3000',), ('h2:2222', 'h3:4000'))
  monkeypatch.setenv(cluster.ENV, cluster.ClusterSpec(pools, 0, 0).to_json())
  assert cluster.ClusterAddress(0, 0, 3).build() == 'h0:2225'
  assert cluster.ClusterAddress(2, 1, 1).build() == 'h3:4001'


@pytest.mark.parametrize('text', [
    None, 'not json', '[]', '{"cluster": {}, "task": {}}',
    '{"cluster": {"workerpool0": ["h:1"]}, "task": {"type": "workerpool1",'
    ' "index": 0}}',
    '{"cluster": {"workerpool0": ["h"]}, "task": {"type": "workerpool0",'
    ' "index": 0}}',
    '{"cluster": {"workerpool1": ["h:1"]}, "task": {"type": "workerpool1",'
    ' "index": 0}}',
])
def test_a_bad_cluster_spec_is_named(text):
  with pytest.raises(UsageError, match='CLUSTER_SPEC'):
    cluster.ClusterSpec.parse(text)


def test_replica_without_cluster_spec_exits_2(capsys, monkeypatch, tmp_path):
  monkeypatch.delenv(cluster.ENV, raising=False)
  rc, _, err = _main(capsys, 'replica', '--run_dir', str(tmp_path),
                     '--segment', '1')
  assert rc == 2 and 'CLUSTER_SPEC' in err, err


def test_request_names_each_launch(capsys):
  cfg = config_lib.apply_overrides(named.tiny(), {
      'cloud.project': 'my-project', 'cloud.region': 'us-central1',
      'cloud.bucket': 'gs://my-bucket', 'cloud.image': 'i',
      'runs_root': '/gcs/my-bucket/runs'})
  job = request.custom_job(cfg, 'train', '/gcs/my-bucket/runs/tiny',
                           segment=3, resume=True)
  assert job['labels']['tandem-segment'] == '3'
  assert job['jobSpec']['workerPoolSpecs'][0]['containerSpec']['args'][-3:] \
      == ['--segment', '3', '--resume']


def test_dry_run_with_another_launch_is_refused(capsys):
  rc, _, err = _main(capsys, 'train', '--config', 'configs/mpo.py:tiny',
                     '--launch', 'vertex_local', '--cloud.dry_run=true')
  assert rc == 2 and 'cloud.dry_run:' in err, err


def _run_dir_of_launch(tmp_path, segment):
  """A run directory whose latest launch is `segment`, as set_up leaves it."""
  run_dir = tmp_path / 'run'
  run_dir.mkdir()
  (run_dir / 'config.json').write_text(json.dumps(config_lib.to_dict(
      named.tiny())))
  (run_dir / 'config_history.jsonl').write_text(
      ''.join(json.dumps({'segment': k}) + '\n' for k in range(1, segment + 1)))
  return run_dir


def _as_replica(monkeypatch, pool, index):
  pools = (('127.0.0.1:9',), ('127.0.0.1:9',), ('127.0.0.1:9',))
  monkeypatch.setenv(cluster.ENV,
                     cluster.ClusterSpec(pools, pool, index).to_json())


def test_a_replica_of_another_launch_refuses_and_stops_its_job(
    capsys, monkeypatch, tmp_path):
  run_dir = _run_dir_of_launch(tmp_path, segment=2)
  _as_replica(monkeypatch, 2, 0)
  rc, _, err = _main(capsys, 'replica', '--run_dir', str(run_dir),
                     '--segment', '1')
  assert rc == 2 and 'last launched as segment 2' in err, err
  stop = cluster.read_stop(str(run_dir / 'nodes' / 'segment-1'))
  assert stop['by'] == 'workerpool2-0' and stop['reason'] == 'refused to start'


def test_a_restarted_replica_refuses_to_start_from_scratch(
    capsys, monkeypatch, tmp_path):
  run_dir = _run_dir_of_launch(tmp_path, segment=1)
  _as_replica(monkeypatch, 1, 0)
  started = run_dir / 'nodes' / 'segment-1' / 'replicas'
  started.mkdir(parents=True)
  (started / 'workerpool1-0.started').write_text('')
  rc, _, err = _main(capsys, 'replica', '--run_dir', str(run_dir),
                     '--segment', '1')
  assert rc == 2 and 'workerpool1-0 already started' in err, err
  assert cluster.read_stop(str(run_dir / 'nodes' / 'segment-1'))['by'] == \
      'workerpool1-0'


def test_the_first_stop_request_keeps_its_reason(tmp_path):
  cluster.request_stop(str(tmp_path), 'workerpool0-0', 'a node failed')
  cluster.request_stop(str(tmp_path), 'workerpool2-1', 'stopping')
  assert cluster.read_stop(str(tmp_path))['reason'] == 'a node failed'
  assert os.listdir(tmp_path / 'replicas') == ['stop']
