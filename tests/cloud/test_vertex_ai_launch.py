"""`tandem train --launch vertex_ai` end to end, up to Vertex AI's API: the
run directory prepared through the bucket's mount (here a temporary folder
named by --cloud.local_mount), then the CustomJob sent by the real client
library (.venv-cloud) to a fake Vertex AI service on loopback."""

import json
import os

import pytest

from tandem.launch import cli
from tests.cloud import fake_vertex
from tests.cloud.test_submit import cloud_python  # noqa: F401  (fixture)
from tests.cloud.test_job import CLOUD, TRAIN


def _launch(capsys, endpoint, mount, *extra):
  rc = cli.main([*TRAIN, *CLOUD, f'--cloud.api_endpoint={endpoint}',
                 f'--cloud.local_mount={mount}', *extra])
  out = capsys.readouterr()
  return rc, out.out, out.err


@pytest.fixture
def mount(tmp_path):
  """The bucket as this machine mounts it, with the runs root in it."""
  (tmp_path / 'bucket' / 'runs').mkdir(parents=True)
  return tmp_path / 'bucket'


def test_the_job_is_prepared_in_the_bucket_and_sent(capsys, mount,
                                                    cloud_python):  # noqa: F811
  del cloud_python  # built, or the test fails saying how
  with fake_vertex.serve() as vertex:
    rc, out, err = _launch(capsys, vertex.endpoint, mount, '--num_actors=3',
                           '--cloud.learner_accelerator=NVIDIA_L4',
                           '--cloud.gpu_image=europe-docker.pkg.dev/p/r/gpu:1')
  assert rc == 0, out + err
  run_dir = mount / 'runs' / 'tiny'
  # What a local launch writes before its nodes start, the replicas read.
  stored = json.loads((run_dir / 'config.json').read_text())
  assert stored['runs_root'] == '/gcs/my-bucket/runs'
  assert stored['num_actors'] == 3
  [sent] = vertex.requests
  assert sent['method'] == 'POST'
  assert sent['path'] == '/v1/projects/my-project/locations/us-central1/' \
      'customJobs'
  pools = sent['body']['jobSpec']['workerPoolSpecs']
  # As the client encodes them: int64 as strings, enums as numbers.
  assert [p['replicaCount'] for p in pools] == ['1', '1', '3']
  assert [set(p['machineSpec']) for p in pools] == [
      {'machineType'}, {'machineType', 'acceleratorType', 'acceleratorCount'},
      {'machineType'}]
  assert pools[1]['machineSpec']['machineType'] == 'g2-standard-8'
  for p in pools:
    assert p['containerSpec']['args'] == [
        'replica', '--run_dir', '/gcs/my-bucket/runs/tiny', '--segment', '1']
  assert 'sent: projects/my-project/locations/us-central1/customJobs/' in out
  record = json.loads((run_dir / 'nodes' / 'segment-1' /
                       'vertex_job.json').read_text())
  assert record['job']['name'] in out


def test_a_refused_fresh_job_takes_back_what_it_wrote(capsys, mount,
                                                     cloud_python):  # noqa: F811
  del cloud_python
  (mount / 'runs' / 'tiny').mkdir()
  (mount / 'runs' / 'tiny' / 'notes.txt').write_text('mine')
  with fake_vertex.serve(fail_with=(403, 'PERMISSION_DENIED',
                                    'no aiplatform.customJobs.create')) as v:
    rc, out, err = _launch(capsys, v.endpoint, mount)
  assert rc == 1, out + err
  assert 'PERMISSION_DENIED' in err and 'Traceback' not in err
  assert 'run the same command again' in err
  # What the folder held before stays; what the launch wrote is gone ...
  assert os.listdir(mount / 'runs' / 'tiny') == ['notes.txt']
  # ... so the same command goes through once the project allows it.
  with fake_vertex.serve() as v:
    rc, out, err = _launch(capsys, v.endpoint, mount)
  assert rc == 0, out + err
  assert len(v.requests) == 1


def test_an_unmounted_runs_root_is_refused_before_sending(capsys, tmp_path,
                                                          cloud_python):  # noqa: F811
  del cloud_python
  with fake_vertex.serve() as vertex:
    rc, _, err = _launch(capsys, vertex.endpoint, tmp_path / 'not-mounted')
  assert rc == 2 and 'runs_root:' in err and '--cloud.local_mount' in err, err
  assert vertex.requests == []


def test_a_resume_elsewhere_than_runs_root_is_refused(capsys, mount, tmp_path,
                                                      cloud_python):  # noqa: F811
  del cloud_python
  import shutil
  with fake_vertex.serve() as vertex:
    assert _launch(capsys, vertex.endpoint, mount)[0] == 0
  copy = tmp_path / 'copy'
  shutil.copytree(mount / 'runs' / 'tiny', copy)
  rc = cli.main(['train', '--resume', str(copy), '--launch', 'vertex_ai',
                 f'--cloud.local_mount={mount}'])
  err = capsys.readouterr().err
  assert rc == 2 and f'--resume {copy}' in err and 'runs_root/name' in err, err


def test_a_resume_through_the_mount_keeps_the_replicas_runs_root(
    capsys, mount, cloud_python):  # noqa: F811
  # The launcher names the run where this machine mounts the bucket; the
  # run's runs_root stays where the replicas see it, not the mount's path.
  del cloud_python
  with fake_vertex.serve() as vertex:
    assert _launch(capsys, vertex.endpoint, mount)[0] == 0
  run_dir = mount / 'runs' / 'tiny'
  rc = cli.main(['train', '--resume', str(run_dir), '--launch', 'vertex_ai',
                 f'--cloud.local_mount={mount}', '--cloud.dry_run=true',
                 '--show_config'])
  out = capsys.readouterr().out
  assert rc == 0
  assert '--runs_root=/gcs/my-bucket/runs' in out, out
  assert json.loads((run_dir / 'config.json').read_text())['runs_root'] == \
      '/gcs/my-bucket/runs'
  # A local resume through the mount keeps it too, so a later cloud resume
  # still finds its run.
  rc = cli.main(['train', '--resume', str(run_dir), '--show_config'])
  assert rc == 0
  assert '--runs_root=/gcs/my-bucket/runs' in capsys.readouterr().out
