"""The `cloud` block of a run config: where and on what a Vertex AI job runs.

Every field is optional to a local run. Their formats are checked when the
config is built (`CloudConfig`), and `require_for_vertex_ai` checks, before
anything is sent, that a `--launch vertex_ai` has what the job needs: a
project, a region, a bucket whose mount holds the runs root, images, and a
GPU image for an accelerator learner.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re

from tandem.agents.core.fields import ConfigError
from tandem.launch.cloud import placement

# Vertex AI's GPU types (AcceleratorType); TPUs would need a TPU build of
# JAX in the learner's image, which the Dockerfile does not make.
GPU_COUNTS = (1, 2, 4, 8, 16)
# The machine families each GPU type is attached to on Compute Engine, and
# the machine with one GPU (a3-megagpu, a3-ultragpu and a4-highgpu come with
# 8 only).
GPU_MACHINES = {
    'NVIDIA_TESLA_T4': (('n1-',), 'n1-standard-8'),
    'NVIDIA_TESLA_V100': (('n1-',), 'n1-standard-8'),
    'NVIDIA_TESLA_P100': (('n1-',), 'n1-standard-8'),
    'NVIDIA_TESLA_P4': (('n1-',), 'n1-standard-8'),
    'NVIDIA_TESLA_A100': (('a2-highgpu-', 'a2-megagpu-'), 'a2-highgpu-1g'),
    'NVIDIA_A100_80GB': (('a2-ultragpu-',), 'a2-ultragpu-1g'),
    'NVIDIA_L4': (('g2-',), 'g2-standard-8'),
    'NVIDIA_H100_80GB': (('a3-highgpu-',), 'a3-highgpu-1g'),
    'NVIDIA_H100_MEGA_80GB': (('a3-megagpu-',), None),
    'NVIDIA_H200_141GB': (('a3-ultragpu-',), None),
    'NVIDIA_B200': (('a4-highgpu-',), None),
}
# GPUs built into a g2 machine, by its vCPUs (the a2/a3/a4 machines name
# theirs: a2-highgpu-4g has 4); an n1 machine takes any count attached.
G2_GPUS = {4: 1, 8: 1, 12: 1, 16: 1, 32: 1, 24: 2, 48: 4, 96: 8}


def gpus_of(machine: str):
  """How many GPUs `machine` comes with, or None where any count attaches
  (n1) or the name does not say."""
  m = re.fullmatch(r'a[234]-[a-z]+-(\d+)g', machine)
  if m:
    return int(m.group(1))
  m = re.fullmatch(r'g2-standard-(\d+)', machine)
  return G2_GPUS.get(int(m.group(1))) if m else None
CPU_LEARNER_MACHINE = 'n2-standard-8'
GPU_TYPES = tuple(GPU_MACHINES)
# Vertex AI mounts Cloud Storage buckets here in every replica (Cloud
# Storage FUSE): gs://<bucket>/x is /gcs/<bucket>/x.
GCS_MOUNT = '/gcs'

_PROJECT = re.compile(r'[a-z][a-z0-9-]{4,28}[a-z0-9]')
_REGION = re.compile(r'[a-z]+-[a-z]+[0-9]+')
_BUCKET = re.compile(r'gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])/?')
_MACHINE = re.compile(r'[a-z][a-z0-9]*(-[a-z0-9]+)+')
_IMAGE = re.compile(r'[^\s]+')


def _fail(field: str, expected: str, got) -> None:
  raise ConfigError(f'cloud.{field}: expected {expected}, got {got!r}')


def _optional(field: str, value, pattern: re.Pattern, expected: str) -> None:
  if not isinstance(value, str) or (value and not pattern.fullmatch(value)):
    _fail(field, expected, value)


@dataclasses.dataclass(frozen=True)
class CloudConfig:
  """A Vertex AI job's settings (docs/deployment.md)."""
  project: str = ''                 # Google Cloud project id
  region: str = ''                  # e.g. us-central1
  bucket: str = ''                  # gs://<bucket>; runs_root under /gcs/<bucket>/
  image: str = ''                   # the CPU image's URI (replay, actors, ...)
  gpu_image: str = ''               # the cuda12 image's URI, for the learner
  learner_accelerator: str = ''     # e.g. NVIDIA_L4; empty: a CPU learner
  learner_accelerator_count: int = 1
  # Empty: n2-standard-8 for a CPU learner, else the accelerator's
  # one-GPU machine (GPU_MACHINES).
  learner_machine_type: str = ''
  cpu_machine_type: str = 'n2-standard-4'
  pools: str = placement.DEFAULT_POOLS
  actors_per_replica: int = 1
  service_account: str = ''         # empty: the project's default
  network: str = ''                 # projects/<number>/global/networks/<name>
  # Where this machine mounts the bucket (the launcher checks and prepares
  # the run directory through it); empty: /gcs/<bucket>, as in a replica.
  local_mount: str = ''
  # Vertex AI's API endpoint; empty: https://<region>-aiplatform.googleapis.com
  api_endpoint: str = ''
  dry_run: bool = False             # print the request, send nothing

  def __post_init__(self):
    _optional('project', self.project, _PROJECT,
              'a Google Cloud project id (6-30 lowercase letters, digits, -)')
    _optional('region', self.region, _REGION, 'a region such as us-central1')
    _optional('bucket', self.bucket, _BUCKET, 'gs://<bucket name>')
    _optional('image', self.image, _IMAGE, 'an image URI without spaces')
    _optional('gpu_image', self.gpu_image, _IMAGE,
              'an image URI without spaces')
    if self.learner_accelerator not in ('',) + GPU_TYPES:
      _fail('learner_accelerator', f'empty (a CPU learner) or one of '
            f'{list(GPU_TYPES)}', self.learner_accelerator)
    if self.learner_accelerator_count not in GPU_COUNTS or isinstance(
        self.learner_accelerator_count, bool):
      _fail('learner_accelerator_count', f'one of {list(GPU_COUNTS)}',
            self.learner_accelerator_count)
    for f in ('learner_machine_type', 'cpu_machine_type'):
      _optional(f, getattr(self, f), _MACHINE,
                'a Compute Engine machine type such as n2-standard-4')
    if not self.cpu_machine_type:
      _fail('cpu_machine_type', 'a Compute Engine machine type', '')
    if self.learner_accelerator:
      families, one = GPU_MACHINES[self.learner_accelerator]
      named = ' or '.join(f'{f}*' for f in families)
      if self.learner_machine_type and not \
          self.learner_machine_type.startswith(families):
        _fail('learner_machine_type', f'a {named} machine: '
              f'{self.learner_accelerator} is attached to those only',
              self.learner_machine_type)
      if not self.learner_machine_type and (
          one is None or self.learner_accelerator_count != 1):
        _fail('learner_machine_type', f'the {named} machine for '
              f'{self.learner_accelerator_count} × '
              f'{self.learner_accelerator} (no default for that count)', '')
      built_in = gpus_of(self.learner_machine)
      if built_in is not None and built_in != self.learner_accelerator_count:
        _fail('learner_accelerator_count', f'{built_in}: '
              f'{self.learner_machine} comes with {built_in} '
              f'{self.learner_accelerator}', self.learner_accelerator_count)
    placement.parse_pools(self.pools)
    if (not isinstance(self.actors_per_replica, int) or
        isinstance(self.actors_per_replica, bool) or
        self.actors_per_replica < 1):
      _fail('actors_per_replica', 'an integer >= 1', self.actors_per_replica)
    for f in ('service_account', 'network', 'local_mount', 'api_endpoint'):
      if not isinstance(getattr(self, f), str):
        _fail(f, 'a string', getattr(self, f))
    if self.local_mount and not posixpath.isabs(self.local_mount):
      _fail('local_mount', 'an absolute path', self.local_mount)
    if not isinstance(self.dry_run, bool):
      _fail('dry_run', 'true or false', self.dry_run)

  @property
  def bucket_name(self) -> str:
    match = _BUCKET.fullmatch(self.bucket)
    return match.group(1) if match else ''

  @property
  def mount(self) -> str:
    """The bucket's mount in a replica: /gcs/<bucket>."""
    return posixpath.join(GCS_MOUNT, self.bucket_name)

  @property
  def learner_machine(self) -> str:
    if self.learner_machine_type:
      return self.learner_machine_type
    if self.learner_accelerator:
      return GPU_MACHINES[self.learner_accelerator][1]
    return CPU_LEARNER_MACHINE

  def endpoint(self) -> str:
    return self.api_endpoint or f'https://{self.region}-aiplatform.googleapis.com'

  def local_view(self, path: str) -> str:
    """Where this machine sees `path` (a path under the bucket's mount in a
    replica): under local_mount when one is set."""
    if not self.local_mount:
      return path
    rest = posixpath.relpath(path, self.mount)
    return posixpath.normpath(posixpath.join(self.local_mount, rest))


def under(path: str, root: str) -> bool:
  path, root = posixpath.normpath(path), posixpath.normpath(root)
  return path == root or path.startswith(root + '/')


def require_for_vertex_ai(cfg) -> None:
  """What a Vertex AI job needs beyond the formats CloudConfig checks; a
  ConfigError naming the first field that lacks it."""
  c = cfg.cloud
  for field, what in (('project', 'the Google Cloud project to run in'),
                      ('region', 'the region to run in (e.g. us-central1)'),
                      ('bucket', 'gs://<bucket>: replicas share the run '
                       'directory through its mount'),
                      ('image', "the CPU image's URI (docker push of the "
                       "project's Dockerfile)")):
    if not getattr(c, field):
      _fail(field, f'{what} (--cloud.{field}) for --launch vertex_ai', '')
  if c.learner_accelerator and not c.gpu_image:
    _fail('gpu_image', f'the cuda12 image\'s URI for a learner on '
          f'{c.learner_accelerator} (the CPU image has CPU-only JAX)', '')
  if c.learner_accelerator and c.gpu_image == c.image:
    _fail('gpu_image', 'the cuda12 image, not the CPU image (cloud.image): '
          f'a learner on {c.learner_accelerator} needs CUDA JAX', c.gpu_image)
  if c.gpu_image and not c.learner_accelerator:
    _fail('learner_accelerator', 'a GPU type for the learner, since '
          'cloud.gpu_image is set (or leave gpu_image empty for a CPU '
          'learner)', '')
  root = posixpath.normpath(cfg.runs_root)
  if not posixpath.isabs(root) or not under(root, c.mount) or root == c.mount:
    raise ConfigError(
        f'runs_root: expected a folder under {c.mount}/ (the mount of '
        f'{c.bucket} that every replica shares: a local path would scatter '
        f'checkpoints and logs over the job\'s VMs and lose them with it), '
        f'got {cfg.runs_root!r}')
  demos = getattr(cfg, 'demos', '')
  if demos and not under(demos, c.mount):
    raise ConfigError(
        f'demos: expected a file under {c.mount}/ (replicas read it from the '
        f'bucket), got {demos!r}')
