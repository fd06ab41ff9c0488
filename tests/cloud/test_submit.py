"""launch/cloud/submit.py under .venv-cloud, with Google's real client library,
against a fake Vertex AI on loopback (fake_vertex): what the client puts on
the wire, what the submitter prints, and how it fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests import REPO_ROOT
from tests.cloud import fake_vertex

CLOUD_PYTHON = os.path.join(REPO_ROOT, '.venv-cloud', 'bin', 'python')
SUBMIT = os.path.join(REPO_ROOT, 'launch', 'cloud', 'submit.py')
PARENT = 'projects/tandem-test/locations/us-central1'

# A CustomJob in Vertex AI's REST JSON, with every kind of field the launcher
# writes: strings, an enum, int32 and int64 numbers, lists, a map.
JOB = {
    'displayName': 'tandem-mpo-run',
    'labels': {'tandem-run': 'make_run_s0'},
    'jobSpec': {
        'serviceAccount': 'trainer@tandem-test.iam.gserviceaccount.com',
        'network': 'projects/123456/global/networks/default',
        'workerPoolSpecs': [
            {
                'machineSpec': {'machineType': 'a2-highgpu-1g',
                                'acceleratorType': 'NVIDIA_TESLA_A100',
                                'acceleratorCount': 1},
                'replicaCount': 1,
                'diskSpec': {'bootDiskType': 'pd-ssd', 'bootDiskSizeGb': 100},
                'containerSpec': {
                    'imageUri': 'us-docker.pkg.dev/tandem-test/tandem/tandem:abc123',
                    'command': ['tandem'],
                    'args': ['replica', '--group', 'learner'],
                    'env': [{'name': 'TANDEM_RUN', 'value': 'make_run_s0'}],
                },
            },
            {
                'machineSpec': {'machineType': 'n2-standard-8'},
                'replicaCount': 3,
                'containerSpec': {
                    'imageUri': 'us-docker.pkg.dev/tandem-test/tandem/tandem:abc123',
                    'args': ['replica', '--group', 'actors'],
                },
            },
        ],
    },
}


@pytest.fixture(scope='module')
def cloud_python() -> str:
  """.venv-cloud's interpreter; its absence fails (CI builds it in `make test`)."""
  if not os.access(CLOUD_PYTHON, os.X_OK):
    pytest.fail(f'{CLOUD_PYTHON} is missing: run `make venv-cloud` (the Vertex AI '
                'client environment, requirements-cloud.lock)', pytrace=False)
  return CLOUD_PYTHON


def submit(python: str, stdin: str,
           env: dict | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([python, SUBMIT], input=stdin, capture_output=True,
                        text=True, timeout=60, cwd=REPO_ROOT, env=env)


def request_for(endpoint: str, job: dict = JOB) -> str:
  return json.dumps({'api_endpoint': endpoint, 'parent': PARENT, 'custom_job': job})


def assert_one_line_no_traceback(stderr: str) -> None:
  assert 'Traceback' not in stderr, stderr
  assert len(stderr.splitlines()) == 1, stderr


@pytest.fixture(scope='module')
def accepted(cloud_python):
  """One submission the fake accepts: (the finished process, its requests)."""
  with fake_vertex.serve() as vertex:
    done = submit(cloud_python, request_for(vertex.endpoint))
  return done, vertex.requests


def test_the_client_posts_to_the_parents_custom_jobs(accepted):
  done, requests = accepted
  assert done.returncode == 0, done.stderr
  assert [(r['method'], r['path']) for r in requests] == [
      ('POST', f'/v1/{PARENT}/customJobs')]
  # The REST transport asks for enums as numbers in its answers and names the
  # parent in a routing header; a fake service sees no credentials at all.
  assert requests[0]['query'] == {'$alt': ['json;enum-encoding=int']}
  assert requests[0]['headers']['x-goog-request-params'] == f'parent={PARENT}'
  assert 'authorization' not in requests[0]['headers']


def test_the_body_is_the_given_job_as_the_client_encodes_it(accepted):
  done, requests = accepted
  assert done.returncode == 0, done.stderr
  body = requests[0]['body']
  learner, actors = body['jobSpec']['workerPoolSpecs']
  assert learner['machineSpec'] == {
      'machineType': 'a2-highgpu-1g',
      # Enums go out as their numbers (NVIDIA_TESLA_A100 = 8 in
      # accelerator_type.proto), int32 fields as JSON numbers.
      'acceleratorType': 8,
      'acceleratorCount': 1,
  }
  # int64 fields (replicaCount) go out as JSON strings, as proto3 JSON writes them.
  assert learner['replicaCount'] == '1'
  assert actors['replicaCount'] == '3'
  assert learner['diskSpec'] == {'bootDiskType': 'pd-ssd', 'bootDiskSizeGb': 100}
  given = JOB['jobSpec']['workerPoolSpecs']
  assert learner['containerSpec'] == given[0]['containerSpec']
  assert actors['containerSpec'] == given[1]['containerSpec']
  assert actors['machineSpec'] == {'machineType': 'n2-standard-8'}
  assert body['displayName'] == JOB['displayName']
  assert body['labels'] == JOB['labels']
  assert body['jobSpec']['serviceAccount'] == JOB['jobSpec']['serviceAccount']
  assert body['jobSpec']['network'] == JOB['jobSpec']['network']
  # Nothing sent beyond what was given (no defaults filled in).
  assert set(body) == set(JOB)
  assert set(body['jobSpec']) == set(JOB['jobSpec'])


def test_stdout_is_one_line_naming_the_created_job(accepted):
  done, _ = accepted
  assert done.returncode == 0, done.stderr
  assert done.stderr == ''
  lines = done.stdout.splitlines()
  assert len(lines) == 1, done.stdout
  result = json.loads(lines[0])
  match = re.fullmatch(rf'{PARENT}/customJobs/(\d+)', result['name'])
  assert match, result
  assert result['state'] == 'JOB_STATE_PENDING'
  assert result['console_url'] == (
      'https://console.cloud.google.com/vertex-ai/locations/us-central1/training/'
      f'{match[1]}?project=tandem-test')


def test_a_refused_job_is_exit_1_with_the_services_message(cloud_python):
  refusal = (403, 'PERMISSION_DENIED',
             "Permission 'aiplatform.customJobs.create' denied on project tandem-test.")
  with fake_vertex.serve(fail_with=refusal) as vertex:
    done = submit(cloud_python, request_for(vertex.endpoint))
  assert done.returncode == 1, (done.stdout, done.stderr)
  assert done.stdout == ''
  assert_one_line_no_traceback(done.stderr)
  assert done.stderr.strip() == (
      'vertex ai refused the job: 403 PERMISSION_DENIED: '
      "Permission 'aiplatform.customJobs.create' denied on project tandem-test.")
  assert len(vertex.requests) == 1


def test_an_unknown_field_is_exit_2_naming_it_and_sends_nothing(cloud_python):
  job = json.loads(json.dumps(JOB))
  job['jobSpec']['workerPoolSpecs'][1]['replicas'] = 3
  with fake_vertex.serve() as vertex:
    done = submit(cloud_python, request_for(vertex.endpoint, job))
  assert done.returncode == 2, (done.stdout, done.stderr)
  assert_one_line_no_traceback(done.stderr)
  assert 'custom_job.jobSpec.workerPoolSpecs[1].replicas' in done.stderr
  assert vertex.requests == []


def test_a_value_of_the_wrong_type_is_exit_2_and_sends_nothing(cloud_python):
  job = json.loads(json.dumps(JOB))
  machine = job['jobSpec']['workerPoolSpecs'][0]['machineSpec']
  machine['acceleratorType'] = 'NVIDIA_TESLA_Z'
  with fake_vertex.serve() as vertex:
    done = submit(cloud_python, request_for(vertex.endpoint, job))
  assert done.returncode == 2, (done.stdout, done.stderr)
  assert_one_line_no_traceback(done.stderr)
  assert 'NVIDIA_TESLA_Z' in done.stderr and 'acceleratorType' in done.stderr
  assert vertex.requests == []


@pytest.mark.parametrize('stdin, names', [
    ('{"api_endpoint": ', 'not JSON'),
    ('["a list"]', 'one JSON object'),
    (json.dumps({'api_endpoint': 'ENDPOINT', 'parent': PARENT}), 'custom_job'),
    (json.dumps({'api_endpoint': 'ENDPOINT', 'parent': 'projects/tandem-test',
                 'custom_job': JOB}), 'parent'),
], ids=['not-json', 'not-an-object', 'no-custom-job', 'bad-parent'])
def test_bad_stdin_is_exit_2_and_sends_nothing(cloud_python, stdin, names):
  with fake_vertex.serve() as vertex:
    done = submit(cloud_python, stdin.replace('ENDPOINT', vertex.endpoint))
  assert done.returncode == 2, (done.stdout, done.stderr)
  assert_one_line_no_traceback(done.stderr)
  assert names in done.stderr
  assert vertex.requests == []


def test_no_credentials_is_exit_2_saying_how_to_log_in(cloud_python, tmp_path):
  # No ADC file, no GOOGLE_APPLICATION_CREDENTIALS, and no probe of the GCE
  # metadata server; the endpoint (.invalid never resolves) is not contacted,
  # since credentials are looked up before any request.
  env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'HOME': str(tmp_path),
         'CLOUDSDK_CONFIG': str(tmp_path), 'NO_GCE_CHECK': 'true'}
  done = submit(cloud_python, request_for('https://vertex.invalid'), env=env)
  assert done.returncode == 2, (done.stdout, done.stderr)
  assert_one_line_no_traceback(done.stderr)
  assert 'gcloud auth application-default login' in done.stderr


def test_run_by_another_python_it_says_which_to_use():
  # .venv has no client library; the module must still import there (tandem's
  # tests import every module of tandem.launch) and say what to run instead.
  done = submit(sys.executable, request_for('http://127.0.0.1:1'))
  assert done.returncode == 2, (done.stdout, done.stderr)
  assert_one_line_no_traceback(done.stderr)
  assert '.venv-cloud/bin/python' in done.stderr
