"""CI does not build the image (`make image` does, in minutes, as root), so
these checks hold the Dockerfile to the files a local install uses: the same Python
minor version, lock file, installer pins and packages, and a CUDA JAX of the
locked version."""

import os
import re
import subprocess
import sys

import pytest

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
  assert 'pip install --require-hashes -r requirements.lock' in docker
  # (The Makefile pins them for .venv and for .venv-cloud alike.)
  pins = lambda text: sorted(set(re.findall(
      r'"((?:pip|setuptools|wheel)==[^"]+)"', text)))
  assert pins(docker) == pins(make) and len(pins(docker)) == 3
  assert len(re.findall(r'"pip==', make)) == 2


def test_the_image_runs_as_an_unprivileged_user():
  docker = _read('Dockerfile')
  users = re.findall(r'^USER\s+(\S+)', docker, re.M)
  assert users and users[-1] not in ('root', '0', '0:0'), users
  # After the last RUN, so nothing undoes it.
  assert docker.rindex('\nUSER ') > docker.rindex('\nRUN ')
  assert re.search(r'useradd .*--uid ' + re.escape(users[-1]) + r'\b', docker)


def _package_dirs() -> dict:
  """pyproject's package-dir: installed name -> folder of the checkout."""
  table = re.search(r'^package-dir = \{([^}]*)\}', _read('pyproject.toml'), re.M)
  return dict(re.findall(r'"([\w.]+)" = "(\w+)"', table.group(1)))


def test_everything_installs_under_tandem_and_every_package_is_listed():
  dirs = _package_dirs()
  assert dirs == {f'tandem.{d}': d for d in ('agents', 'launch', 'configs')}
  listed = re.search(r'^packages = \[([^\]]*)\]', _read('pyproject.toml'),
                     re.M)
  listed = set(re.findall(r'"([\w.]+)"', listed.group(1)))
  found = set()
  for folder in dirs.values():
    for path, _, files in os.walk(os.path.join(ROOT, folder)):
      if '__init__.py' in files:
        found.add('tandem.' + os.path.relpath(path, ROOT).replace(os.sep, '.'))
  assert listed == found


def test_image_copies_every_installed_package():
  docker = _read('Dockerfile')
  for folder in _package_dirs().values():
    assert re.search(rf'^COPY {folder} \./{folder}$', docker, re.M), folder
  assert re.search(r'^ENTRYPOINT \["tandem"\]', docker, re.M)
  ignored = _read('.dockerignore').split()
  assert '.venv' in ignored and 'runs' in ignored


def _pins_and_hashes(name: str) -> dict:
  """{pin line: [sha256, ...]} of a hashed lock."""
  pins: dict = {}
  current = None
  for line in _read(name).splitlines():
    if re.match(r'^[A-Za-z0-9]', line):
      current = line.rstrip(' \\')
      pins[current] = []
    elif line.strip().startswith('--hash=sha256:') and current:
      pins[current].append(line.strip().split(':', 1)[1].rstrip(' \\'))
  return pins


@pytest.mark.parametrize('lock', ['requirements.lock', 'requirements-lint.lock',
                                  'requirements-cloud.lock',
                                  'requirements-cuda12.lock'])
def test_every_lock_pins_exact_versions_with_hashes_and_is_installed_so(lock):
  pins = _pins_and_hashes(lock)
  assert pins and all('==' in pin for pin in pins), pins
  assert all(hashes and all(re.fullmatch(r'[0-9a-f]{64}', h) for h in hashes)
             for hashes in pins.values()), lock
  installs = _read('Makefile') + _read('Dockerfile')
  assert f'--require-hashes -r {lock}' in installs


def test_cuda_build_installs_the_locked_jax_and_pinned_cuda_wheels():
  docker = _read('Dockerfile')
  assert ('pip install --require-hashes -r requirements-cuda12.lock -c '
          'requirements.lock') in docker
  lines = [line.rstrip(' \\') for line in
           _read('requirements-cuda12.lock').splitlines()
           if line and not line.startswith(('#', ' '))]
  cuda = re.fullmatch(r'jax\[cuda12\]==([\d.]+)', lines[0])
  assert cuda and cuda.group(1) == _lock()['jax'] == _lock()['jaxlib']
  # Every CUDA wheel pinned, none of them a second pin of the main lock's.
  assert all(re.fullmatch(r'(nvidia-[a-z0-9-]+|jax-cuda12-[a-z]+)==[\d.]+', line)
             for line in lines[1:]), lines
  assert any(line.startswith('nvidia-cudnn-cu12==') for line in lines)
  assert not {line.split('==')[0] for line in lines[1:]} & set(_lock())


def test_only_tandem_is_installed(tmp_path):
  # Outside the checkout, the generic folder names are not importable: they
  # install as tandem.agents, tandem.launch and tandem.configs.
  def imports(module):
    return subprocess.run([sys.executable, '-c', f'import {module}'],
                          cwd=tmp_path, capture_output=True).returncode == 0
  assert not any(imports(m) for m in ('agents', 'launch', 'configs'))
  assert imports('tandem.launch.cli') and imports('tandem.agents.mpo.learner')
