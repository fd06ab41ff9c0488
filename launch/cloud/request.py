"""The Vertex AI CustomJob that runs a Tandem program, as Vertex AI's REST
JSON (`workerPoolSpecs`, `machineSpec`, `containerSpec`, ...).

Every replica runs the image's entrypoint, `tandem`, with `replica_args`:
`tandem replica` reads the run's config.json from the shared run directory,
finds its pool and index in CLUSTER_SPEC, and runs its nodes (replica.py).
The launcher has written config.json (and everything else a local launch
writes before starting nodes) by the time the job is sent.
"""

from __future__ import annotations

import posixpath
import re

from tandem.launch.cloud import placement

# The entrypoint of the project's Dockerfile.
ENTRYPOINT = ('tandem',)
REPLICA_COMMAND = 'replica'


def replica_args(run_dir: str, segment: int, resume: bool) -> list[str]:
  """What every replica runs after the entrypoint (the same for all: each
  finds its own nodes)."""
  return [REPLICA_COMMAND, '--run_dir', run_dir, '--segment', str(segment)] + (
      ['--resume'] if resume else [])


def plan_of(cfg) -> placement.Plan:
  return placement.plan(cfg.cloud.pools, cfg.num_actors,
                        cfg.cloud.actors_per_replica)


def _label(text: str) -> str:
  """A Vertex AI label value: lowercase letters, digits, - and _, <= 63."""
  return re.sub(r'[^a-z0-9_-]', '-', text.lower())[:63]


def machine_spec(cfg, pool: placement.Pool) -> dict:
  c = cfg.cloud
  if pool.has_learner and c.learner_accelerator:
    return {'machineType': c.learner_machine,
            'acceleratorType': c.learner_accelerator,
            'acceleratorCount': c.learner_accelerator_count}
  if pool.has_learner:
    return {'machineType': c.learner_machine}
  return {'machineType': c.cpu_machine_type}


def custom_job(cfg, command: str, run_dir: str, *, segment: int,
               resume: bool) -> dict:
  """The CustomJob (REST JSON) for this launch of the run in `run_dir` (the
  path every replica sees, under /gcs/<bucket>/)."""
  c = cfg.cloud
  args = replica_args(run_dir, segment, resume)
  pools = []
  for pool in plan_of(cfg).pools:
    image = c.gpu_image if pool.has_learner and c.learner_accelerator \
        else c.image
    pools.append({
        'machineSpec': machine_spec(cfg, pool),
        'replicaCount': len(pool.replicas),
        'containerSpec': {
            'imageUri': image,
            'command': list(ENTRYPOINT),
            'args': list(args),
            # Node logs reach Cloud Logging line by line.
            'env': [{'name': 'PYTHONUNBUFFERED', 'value': '1'}],
        },
    })
  job_spec = {
      'workerPoolSpecs': pools,
      # Vertex AI's own output folder for the job (AIP_MODEL_DIR and the
      # like): the run directory, in the bucket.
      'baseOutputDirectory': {
          'outputUriPrefix':
              f'gs://{c.bucket_name}/{posixpath.relpath(run_dir, c.mount)}'},
  }
  if c.service_account:
    job_spec['serviceAccount'] = c.service_account
  if c.network:
    job_spec['network'] = c.network
  return {
      'displayName': f'tandem-{command}-{cfg.name}-{segment}'[:128],
      'labels': {'tandem-run': _label(cfg.name),
                 'tandem-command': _label(command),
                 'tandem-segment': str(segment)},
      'jobSpec': job_spec,
  }


def parent(cfg) -> str:
  return f'projects/{cfg.cloud.project}/locations/{cfg.cloud.region}'
