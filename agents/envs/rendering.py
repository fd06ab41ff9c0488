"""Off-screen frames of an environment, on machines without a display.

MuJoCo (dm_control, gymnasium's MuJoCo tasks) renders through the OpenGL
back end named by MUJOCO_GL, which must be chosen before MuJoCo is first
imported: 'egl' (Mesa's or NVIDIA's EGL; headless, and GPU-accelerated
where a driver is present) or 'osmesa' (Mesa's software renderer). Which
one works depends on the machine's system libraries, so each candidate is
tried in a fresh interpreter before this one commits to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional, Sequence

import numpy as np

BACKENDS = ('egl', 'osmesa')
# What each back end needs from Debian/Ubuntu (apt install ...).
PACKAGES = {'egl': 'libegl1 libgl1-mesa-dri', 'osmesa': 'libosmesa6'}
_PROBE = ('from dm_control import mujoco\n'
          'p = mujoco.Physics.from_xml_string('
          '"<mujoco><worldbody><geom size=\'.1\'/></worldbody></mujoco>")\n'
          'assert p.render(8, 8).shape == (8, 8, 3)\n')


class RenderingUnavailable(RuntimeError):
  """No OpenGL back end renders here; the message says what to install."""


def _works(backend: str) -> Optional[str]:
  """None if `backend` renders a frame in a fresh interpreter, else the
  last line of its error."""
  env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
  try:
    probe = subprocess.run([sys.executable, '-c', _PROBE], env=env,
                           capture_output=True, text=True, timeout=120)
  except subprocess.TimeoutExpired:
    return 'timed out'
  if probe.returncode == 0:
    return None
  lines = probe.stderr.strip().splitlines()
  return lines[-1] if lines else f'exit status {probe.returncode}'


def choose_backend(candidates: Optional[Sequence[str]] = None) -> str:
  """Sets MUJOCO_GL (and PyOpenGL's platform) to the first back end that
  renders here and returns it: an explicit MUJOCO_GL other than 'disable'
  is the only candidate, else `candidates` (BACKENDS). Must run before
  MuJoCo is imported. RenderingUnavailable names what each tried back end
  said and the Debian packages that provide one."""
  chosen = os.environ.get('MUJOCO_GL', '')
  explicit = candidates is None and chosen not in ('', 'disable')
  if candidates is None:
    candidates = (chosen,) if explicit else BACKENDS
  failures = []
  for backend in candidates:
    why = _works(backend)
    if why is None:
      os.environ['MUJOCO_GL'] = backend
      os.environ['PYOPENGL_PLATFORM'] = backend
      return backend
    failures.append(f'MUJOCO_GL={backend}: {why}')
  raise RenderingUnavailable(
      'no OpenGL back end renders on this machine ('
      + '; '.join(failures) + '); ' + _remedy(candidates, explicit))


def _remedy(tried: Sequence[str], explicit: bool) -> str:
  """What to do when none of `tried` renders: the Debian packages of those
  Tandem knows, and, where the user's own MUJOCO_GL was the only one tried,
  leaving the choice to Tandem."""
  known = [b for b in tried if b in PACKAGES]
  steps = []
  if known:
    steps.append('install ' + ' or '.join(f'{PACKAGES[b]} (for {b})'
                                          for b in known)
                 + f', e.g. `apt install {PACKAGES[known[0]]}`')
  if explicit:
    steps.append(f'unset MUJOCO_GL (set to {tried[0]!r}) to let Tandem try '
                 + ' and '.join(BACKENDS) + ', or set it to one of them'
                 + ('' if known else ' (`apt install '
                    + PACKAGES[BACKENDS[0]] + '` for egl)'))
  return '; or '.join(steps)


def needs_mujoco_gl(name: str) -> bool:
  """Whether the environment `name` ("domain:task" or "gym:<id>") draws
  through MuJoCo, so that a back end must be chosen first: every dm_control
  task, and the gymnasium ids whose registry entry point is one of its
  MuJoCo environments. Others (gymnasium's classic control) draw with
  their own renderer (pygame)."""
  prefix, _, env_id = name.partition(':')
  if prefix != 'gym':
    return True
  import gymnasium
  spec = gymnasium.registry.get(env_id)
  entry = getattr(spec, 'entry_point', '')
  return not isinstance(entry, str) or 'mujoco' in entry


def frame(env, height: int, width: int) -> np.ndarray:
  """The current frame of a `make_environment(..., render=True)`
  environment: [height, width, 3] uint8. dm_control renders at the size
  asked (camera 0); a gymnasium environment renders at its own size."""
  inner = getattr(env, 'wrapped', env)
  physics = getattr(inner, 'physics', None)
  if physics is not None:
    # The model's off-screen buffer (640 x 480 unless its XML says more)
    # bounds the size MuJoCo can draw: grown to the size asked.
    limits = physics.model.vis.global_
    limits.offwidth = max(int(limits.offwidth), width)
    limits.offheight = max(int(limits.offheight), height)
    return np.asarray(physics.render(height, width, camera_id=0), np.uint8)
  gym_env = getattr(inner, 'gym_env', None)
  if gym_env is not None:
    import gymnasium
    os.environ.setdefault('PYGAME_HIDE_SUPPORT_PROMPT', '1')
    try:
      image = gym_env.render()
    except gymnasium.error.DependencyNotInstalled as e:
      hint = ('; requirements.lock pins pygame for these tasks, and '
              '`make venv` installs it' if 'pygame' in str(e) else '')
      raise RenderingUnavailable(
          f'gymnasium cannot draw it here: {e}{hint}') from e
    if image is None:
      raise RenderingUnavailable(
          'this gymnasium environment renders no rgb_array frames')
    return np.asarray(image, np.uint8)
  raise RenderingUnavailable(f'{type(inner).__name__} cannot render frames')
