"""Adds every published file's sha256 to each `name==version` pin of a lock,
so `pip install --require-hashes -r LOCK` installs only those files.

    python3 scripts/hash_lock.py requirements.lock [more.lock ...]

The hashes come from PyPI's simple index (PEP 691 JSON): every wheel and
sdist of that version, for any platform, as pip-compile --generate-hashes
lists them. A pin's existing hashes are replaced; comments and blank lines
are kept. Run it after changing a pin. Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request

INDEX = 'https://pypi.org/simple/{name}/'
PIN = re.compile(r'^(?P<name>[A-Za-z0-9_.-]+)(?P<extras>\[[^\]]*\])?=='
                 r'(?P<version>[^\s;\\]+)')


def normalise(name: str) -> str:
  return re.sub(r'[-_.]+', '-', name).lower()


def hashes(name: str, version: str) -> list[str]:
  """sha256 of every file PyPI holds for name==version, sorted."""
  request = urllib.request.Request(
      INDEX.format(name=normalise(name)),
      headers={'Accept': 'application/vnd.pypi.simple.v1+json'})
  with urllib.request.urlopen(request, timeout=60) as answer:
    files = json.load(answer)['files']
  wanted = set()
  for f in files:
    if _version_of(f['filename'], name) == version and 'sha256' in f['hashes']:
      wanted.add(f['hashes']['sha256'])
  if not wanted:
    raise SystemExit(f'{name}=={version}: PyPI lists no file of that version')
  return sorted(wanted)


def _version_of(filename: str, name: str) -> str | None:
  """The version in a wheel's or sdist's file name."""
  stem = normalise(name).replace('-', '_')
  base = filename
  for suffix in ('.tar.gz', '.zip', '.tar.bz2'):
    if base.endswith(suffix):
      base = base[:-len(suffix)]
      head, _, version = base.rpartition('-')
      return version if normalise(head).replace('-', '_') == stem else None
  if base.endswith('.whl'):
    parts = base[:-4].split('-')
    if len(parts) >= 5 and normalise(parts[0]).replace('-', '_') == stem:
      return parts[1]
  return None


def rewrite(text: str) -> str:
  """The lock with its pins' hash lines (re)made."""
  out = []
  for line in text.splitlines():
    stripped = line.strip()
    if stripped.startswith('--hash='):
      continue  # the pin above gets fresh ones
    match = PIN.match(stripped)
    if not match:
      out.append(line)
      continue
    pin = stripped.rstrip('\\').rstrip()
    found = hashes(match['name'], match['version'])
    out.append(pin + ' \\')
    out.extend(f'    --hash=sha256:{h}' + (' \\' if i < len(found) - 1 else '')
               for i, h in enumerate(found))
  return '\n'.join(out) + '\n'


def main(paths: list[str]) -> int:
  for path in paths:
    with open(path) as f:
      text = f.read()
    new = rewrite(text)
    with open(path, 'w') as f:
      f.write(new)
    print(f'{path}: {sum(1 for line in new.splitlines() if PIN.match(line))} '
          'pins hashed')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
