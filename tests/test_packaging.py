"""The Dockerfile cannot be built on these machines (no Docker daemon), so
these checks hold it to the files a local install uses: the same Python
minor version, lock file, installer pins and packages, and a CUDA JAX of the
locked version."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(name):
  with open(os.path.join(ROOT, name)) as f:
    return f.read()


def _lock():
  pins = {}
  for line in _read('requirements.lock').splitlines():
    m = re.match(r'^([A-Za-z0-9_.\[\]-]+)==(\S+)', line.strip())
    if m:
      pins[m.group(1).lower()] = m.group(2)
  return pins


def test_base_image_is_the_python_the_project_runs_on():
  base = re.search(r'^FROM python:(\d+)\.(\d+)', _read('Dockerfile'), re.M)
  assert base, 'Dockerfile must start FROM an official python image'
  assert (int(base.group(1)), int(base.group(2))) == sys.version_info[:2] \
      == (3, 10)


def test_image_installs_the_lock_with_the_makefile_pins():
  docker, make = _read('Dockerfile'), _read('Makefile')
  assert 'COPY requirements.lock' in docker
  assert 'pip install -r requirements.lock' in docker
  pins = lambda text: sorted(re.findall(r'"((?:pip|setuptools|wheel)==[^"]+)"',
                                        text))
  assert pins(docker) == pins(make) and len(pins(docker)) == 3


def test_image_copies_every_installed_package():
  include = re.search(r'include = \[([^\]]*)\]', _read('pyproject.toml'))
  packages = re.findall(r'"(\w+)\*"', include.group(1))
  assert packages
  docker = _read('Dockerfile')
  for package in packages:
    assert re.search(rf'^COPY {package} \./{package}$', docker, re.M), package
  assert re.search(r'^ENTRYPOINT \["tandem"\]', docker, re.M)
  ignored = _read('.dockerignore').split()
  assert '.venv' in ignored and 'runs' in ignored


def test_cuda_build_installs_the_locked_jax():
  cuda = re.search(r'jax\[cuda12\]==([\d.]+)', _read('Dockerfile'))
  assert cuda and cuda.group(1) == _lock()['jax'] == _lock()['jaxlib']
