"""`tandem render`: a run's policy as a video (GIF, MP4), rendered
off-screen."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tandem.agents.core import checkpointing
from tandem.agents.envs import rendering
from tandem.agents.runtime.rundir import RunDir
from tandem.configs import mpo as named
from tandem.launch import config as config_lib
from tandem.launch import errors
from tandem.launch import render
from tests import REPO_ROOT, no_gl


def _tandem(*args, env=None):
  """`tandem ARGS` in a fresh interpreter: MuJoCo's GL back end is chosen
  before its first import, which this test process has long passed."""
  environ = {k: v for k, v in os.environ.items() if k != 'MUJOCO_GL'}
  environ.update(env or {})
  return subprocess.run([sys.executable, '-m', 'tandem.launch.cli', *args],
                        cwd=REPO_ROOT, env=environ, capture_output=True,
                        text=True, timeout=300)


def _untrained_run(root, name: str, steps=(10,), base=None,
                   **overrides) -> RunDir:
  """A run directory of `base` (the MPO tiny config by default) with
  `overrides`, holding an untrained learner checkpoint at each of
  `steps`."""
  from tandem.launch import programs
  cfg = config_lib.apply_overrides(base or named.tiny(),
                                   {'runs_root': str(root), **overrides})
  rd = RunDir(str(root / name)).make()
  with open(rd.config, 'w') as f:
    json.dump(config_lib.to_dict(cfg), f)
  for step in steps:
    checkpointing.save_numbered(
        rd.learner_checkpoints, step,
        programs.for_config(cfg).learner_template(cfg),
        metadata={'counts': {'env_steps': step}})
  return rd


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  """A run directory of the tiny config with checkpoints at learner steps
  10 and 20 (untrained policies: what is drawn does not matter here)."""
  return _untrained_run(tmp_path_factory.mktemp('runs'), 'tiny',
                        steps=(10, 20))


@pytest.fixture(scope='module')
def backend():
  """The back end `tandem render` will find (probed in fresh interpreters;
  this process's MUJOCO_GL is put back)."""
  before = {k: os.environ.pop(k, None) for k in ('MUJOCO_GL',
                                                  'PYOPENGL_PLATFORM')}
  try:
    return rendering.choose_backend()
  except rendering.RenderingUnavailable as e:
    no_gl(e)
  finally:
    for k, v in before.items():
      os.environ.pop(k, None)
      if v is not None:
        os.environ[k] = v


def test_render_writes_a_captioned_gif_of_the_policy(run, backend, tmp_path):
  from PIL import Image
  out = tmp_path / 'policy.gif'
  r = _tandem('render', run.root, '--steps', '40', '--every', '4',
              '--out', str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  assert f'MUJOCO_GL={backend}' in r.stdout and 'ckpt-000000000020' in r.stdout
  with Image.open(out) as gif:
    assert gif.n_frames == 40 // 4 + 1  # steps 0, 4, ..., 40
    assert gif.size == (320, 240 + render.BAND)
    frames = []
    for i in range(gif.n_frames):
      gif.seek(i)
      frames.append(np.asarray(gif.convert('RGB')))
  scene = [f[render.BAND:] for f in frames]
  # A rendered scene, not a blank: many colours; and it moves.
  assert len(np.unique(scene[0].reshape(-1, 3), axis=0)) > 20
  assert not np.array_equal(scene[0], scene[-1])
  # The caption band changes as the step and return do.
  assert not np.array_equal(frames[0][:render.BAND], frames[-1][:render.BAND])


def read_mp4(path):
  """(frames [N, H, W, 3] uint8, (W, H)) as ffmpeg decodes the file."""
  import imageio_ffmpeg
  from tandem.launch import render
  reader = imageio_ffmpeg.read_frames(str(path))
  with render.quiet_fork_warning():
    meta = next(reader)   # starts ffmpeg
  w, h = meta['size']
  frames = [np.frombuffer(b, np.uint8).reshape(h, w, 3) for b in reader]
  return np.stack(frames), (w, h)


@pytest.mark.slow  # 13 s; the gymnasium test below decodes an MP4 too
def test_render_writes_a_playable_mp4_of_the_gifs_frames(run, backend,
                                                         tmp_path):
  from PIL import Image
  paths = {kind: tmp_path / f'policy.{kind}' for kind in ('mp4', 'gif')}
  for path in paths.values():
    r = _tandem('render', run.root, '--steps', '40', '--every', '4',
                '--out', str(path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'Warning' not in r.stderr, r.stderr[-2000:]
  frames, size = read_mp4(paths['mp4'])
  assert len(frames) == 40 // 4 + 1 and size == (320, 240 + render.BAND)
  with Image.open(paths['gif']) as gif:
    stills = []
    for i in range(gif.n_frames):
      gif.seek(i)
      stills.append(np.asarray(gif.convert('RGB'), np.int16))
  # Each decoded frame is the GIF's frame of the same step, up to the
  # codecs' losses: its caption band (step, return) is nearest that one's.
  for i, frame in enumerate(frames.astype(np.int16)):
    assert np.abs(frame - stills[i]).mean() < 4, i
    bands = [np.abs(frame[:render.BAND] - s[:render.BAND]).mean() for s in stills]
    assert int(np.argmin(bands)) == i, (i, bands)
  assert not list(tmp_path.glob('.tmp-*'))


def test_a_gymnasium_task_renders_at_its_own_size(tmp_path_factory, backend,
                                                 tmp_path):
  """gym:Hopper-v5 through gymnasium's rgb_array frames (480 × 480, its
  default) with the caption band above, into a playable MP4."""
  rd = _untrained_run(tmp_path_factory.mktemp('gym_runs'), 'hopper',
                      env='gym:Hopper-v5')
  out = tmp_path / 'hopper.mp4'
  r = _tandem('render', rd.root, '--steps', '12', '--every', '3',
              '--out', str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  assert 'gym:Hopper-v5' in r.stdout and 'Exception' not in r.stderr, r.stderr
  frames, size = read_mp4(out)
  assert len(frames) == 12 // 3 + 1 and size == (480, 480 + render.BAND)
  scene = frames[:, render.BAND:].astype(np.int16)
  assert len(np.unique(frames[0, render.BAND:].reshape(-1, 3), axis=0)) > 20
  assert np.abs(scene[0] - scene[-1]).mean() > 0.5  # the hopper moved


@pytest.fixture(scope='module')
def pendulum_run(tmp_path_factory):
  """A run directory of gym:Pendulum-v1 (drawn by pygame, not MuJoCo)."""
  return _untrained_run(tmp_path_factory.mktemp('pendulum_runs'),
                        'pendulum', env='gym:Pendulum-v1')


def test_a_task_mujoco_does_not_draw_needs_no_gl_back_end(pendulum_run,
                                                          tmp_path):
  # No MuJoCo back end works with this MUJOCO_GL; Pendulum needs none.
  out = tmp_path / 'pendulum.png'
  r = _tandem('render', pendulum_run.root, '--steps', '6', '--every', '3',
              '--out', str(out), env={'MUJOCO_GL': 'no_such_backend'})
  assert r.returncode == 0, r.stderr[-2000:]
  assert "gymnasium's own renderer" in r.stdout
  assert 'pygame' not in r.stdout  # its greeting kept off the output
  from PIL import Image
  strip = np.asarray(Image.open(out).convert('RGB'))
  assert strip.shape == (500 + render.BAND, 3 * 500, 3)  # steps 0, 3, 6
  assert len(np.unique(strip[render.BAND:, :500].reshape(-1, 3),
                       axis=0)) > 2  # the pendulum, not a blank frame
  # A size asked for: gymnasium's 500 x 500 frames scaled to it.
  r = _tandem('render', pendulum_run.root, '--steps', '3', '--every', '3',
              '--size', '250x200', '--out', str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  scaled = np.asarray(Image.open(out).convert('RGB'))
  assert scaled.shape == (200 + render.BAND, 2 * 250, 3)
  assert len(np.unique(scaled[render.BAND:, :250].reshape(-1, 3),
                       axis=0)) > 2


def test_a_missing_drawing_library_is_named_not_a_traceback(pendulum_run,
                                                            tmp_path):
  # pygame made unimportable: gymnasium says it is needed, render exits 2.
  (tmp_path / 'fake').mkdir()
  (tmp_path / 'fake' / 'pygame.py').write_text(
      'raise ImportError("no pygame here")\n')
  out = tmp_path / 'pendulum.png'
  r = _tandem('render', pendulum_run.root, '--steps', '3', '--out',
              str(out), env={'PYTHONPATH': str(tmp_path / 'fake')})
  assert r.returncode == 2, r.stderr[-2000:]
  assert 'gym:Pendulum-v1' in r.stderr and 'pygame' in r.stderr
  assert 'Traceback' not in r.stderr and not out.exists()


def test_which_tasks_draw_through_mujoco():
  assert rendering.needs_mujoco_gl('cartpole:swingup')
  assert rendering.needs_mujoco_gl('gym:Hopper-v5')
  assert not rendering.needs_mujoco_gl('gym:Pendulum-v1')
  assert not rendering.needs_mujoco_gl('gym:MountainCarContinuous-v0')


def test_an_odd_frame_size_is_padded_not_rescaled(tmp_path):
  from tandem.launch import render
  rng = np.random.default_rng(0)
  frames = [np.full((31, 45, 3), v, np.uint8) for v in (0, 128, 255)]
  frames[1][:, :, 0] = rng.integers(0, 256, (31, 45))
  render.write_mp4(str(tmp_path / 'odd.mp4'), frames, fps=25)
  decoded, size = read_mp4(tmp_path / 'odd.mp4')
  assert size == (46, 32) and len(decoded) == 3
  # The frames' own pixels where they were; the padding white.
  assert decoded[0][:30, :44].mean() < 10
  assert decoded[2].mean() > 245
  assert decoded[0][31].mean() > 200 and decoded[0][:, 45].mean() > 200


def test_render_picks_a_checkpoint_by_step_and_names_the_ones_there(
    run, backend, tmp_path):
  out = tmp_path / 'early.gif'
  # Larger than MuJoCo's default off-screen buffer (640 x 480).
  r = _tandem('render', run.root, '--checkpoint', '10', '--steps', '4',
              '--size', '800x600', '--out', str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  assert 'ckpt-000000000010' in r.stdout and out.exists()
  from PIL import Image
  with Image.open(out) as gif:
    assert gif.size == (800, 600 + render.BAND)
  r = _tandem('render', run.root, '--checkpoint', '15', '--steps', '4',
              '--out', str(tmp_path / 'none.gif'))
  assert r.returncode == 2 and '[10, 20]' in r.stderr, r.stderr[-2000:]
  assert 'Traceback' not in r.stderr


@pytest.mark.parametrize('args, named', [
    (['--out', 'clip.avi'], '.gif or .mp4 file (animated) or a .png'),
    (['--episodes', '0'], '--episodes'),
    (['--checkpoint', 'best'], "'latest' or a learner step"),
    (['--size', '640'], '--size: expected WIDTHxHEIGHT'),
    (['--size', '8x8'], 'each 16 to 4096'),
    (['--no-beside_expert', '--demos', 'x.npz'], 'not go with'),
])
def test_render_refuses_bad_arguments_before_rendering(run, args, named):
  r = _tandem('render', run.root, *args)
  assert r.returncode == 2 and named in r.stderr, r.stderr[-2000:]
  assert 'Traceback' not in r.stderr


def test_render_refuses_a_run_without_checkpoints_and_unwritable_outputs(
    run, tmp_path, capsys):
  """Each refused before any rendering, exit 2, naming the problem."""
  from tandem.launch import cli
  bare = tmp_path / 'bare'
  bare.mkdir()
  with open(run.config) as f:
    (bare / 'config.json').write_text(f.read())
  a_file = tmp_path / 'a_file'
  a_file.write_text('')
  a_dir = tmp_path / 'clip.gif'
  a_dir.mkdir()
  cases = [
      ([str(bare)], 'no learner checkpoint'),
      ([run.root, '--out', str(a_file / 'x.gif')],
       'does not exist or is not writable'),
      ([run.root, '--out', str(a_dir)], 'is a directory'),
  ]
  for args, why in cases:
    assert cli.main(['render', *args]) == errors.EXIT_BAD_INPUT, args
    assert why in capsys.readouterr().err, args
  assert not (bare / 'render-latest.gif').exists()
  assert list(a_dir.iterdir()) == []


def test_without_a_gl_back_end_render_says_what_to_install(run, tmp_path):
  r = _tandem('render', run.root, '--out', str(tmp_path / 'x.gif'),
              env={'MUJOCO_GL': 'no_such_backend'})
  assert r.returncode == 2, r.stderr[-2000:]
  assert 'no OpenGL back end renders' in r.stderr
  assert 'MUJOCO_GL=no_such_backend' in r.stderr
  # The user's own MUJOCO_GL was the only one tried: leave it to Tandem.
  assert "unset MUJOCO_GL (set to 'no_such_backend')" in r.stderr
  assert not (tmp_path / 'x.gif').exists()


def test_a_run_whose_environment_cannot_be_made_here_is_named(run, tmp_path):
  with open(run.config) as f:
    config = json.load(f)
  config['env'] = 'gym:NoSuchTask-v0'
  moved = tmp_path / 'elsewhere'
  os.makedirs(moved / 'checkpoints')
  (moved / 'config.json').write_text(json.dumps(config))
  os.symlink(run.learner_checkpoints, moved / 'checkpoints' / 'learner')
  r = _tandem('render', str(moved), '--steps', '4', '--out',
              str(tmp_path / 'x.gif'))
  assert r.returncode == 2, r.stderr[-2000:]
  assert 'gym:NoSuchTask-v0 cannot be made on this machine' in r.stderr
  assert 'Traceback' not in r.stderr


def test_a_failed_write_is_named_and_leaves_nothing(pendulum_run, tmp_path,
                                                   monkeypatch, capsys):
  # In this process (no MuJoCo back end here): a task pygame draws.
  from tandem.launch import cli

  def full_disk(*args, **kwargs):
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(render, 'write_gif', full_disk)
  out = tmp_path / 'x.gif'
  assert cli.main(['render', pendulum_run.root, '--steps', '2',
                   '--out', str(out)]) == errors.EXIT_BAD_INPUT
  assert 'No space left on device' in capsys.readouterr().err
  assert not out.exists()


def test_a_users_own_mujoco_gl_that_fails_gets_a_way_out(monkeypatch):
  monkeypatch.setattr(rendering, '_works', lambda backend: 'cannot load')
  monkeypatch.setenv('MUJOCO_GL', 'glfw')
  with pytest.raises(rendering.RenderingUnavailable) as info:
    rendering.choose_backend()
  message = str(info.value)
  assert 'MUJOCO_GL=glfw: cannot load' in message
  assert "unset MUJOCO_GL (set to 'glfw') to let Tandem try egl and osmesa" \
      in message
  assert '?' not in message  # no package made up for a back end it knows not


def test_the_install_hint_names_each_back_ends_debian_packages(monkeypatch):
  monkeypatch.setattr(rendering, '_works', lambda backend: 'cannot load')
  with pytest.raises(rendering.RenderingUnavailable) as info:
    rendering.choose_backend(('egl', 'osmesa'))
  message = str(info.value)
  assert 'libegl1 libgl1-mesa-dri (for egl)' in message
  assert 'libosmesa6 (for osmesa)' in message


def test_a_png_out_is_a_strip_of_the_frames_in_a_row(run, backend, tmp_path):
  from PIL import Image
  out = tmp_path / 'strip.png'
  r = _tandem('render', run.root, '--steps', '30', '--every', '10',
              '--size', '200x150', '--out', str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  with Image.open(out) as strip:
    assert strip.size == (4 * 200, 150 + render.BAND)  # steps 0, 10, 20, 30
  r = _tandem('render', run.root, '--steps', '1000', '--every', '10',
              '--out', str(tmp_path / 'long.png'))
  assert r.returncode == 2 and 'at most 12' in r.stderr, r.stderr[-2000:]


@pytest.fixture(scope='module')
def ail_run(tmp_path_factory):
  """An adversarial run of the tiny config with one checkpoint, learning
  from two demonstration episodes collected from env seeds 0 and 1."""
  from tandem.configs import ail as named_ail
  from tests.integration.demo_data import write_cartpole_demos
  root = tmp_path_factory.mktemp('ail_runs')
  demos = write_cartpole_demos(str(root / 'demos.npz'), episodes=2)
  return _untrained_run(root, 'ail', base=named_ail.tiny(),
                        demos=demos), demos


def test_beside_expert_replays_the_demonstration_from_its_start(
    ail_run, backend, tmp_path):
  from PIL import Image
  from tandem.agents.ail import demonstrations
  rd, demos = ail_run
  out = tmp_path / 'pair.gif'
  r = _tandem('render', rd.root, '--beside_expert', '--every', '100',
              '--out', str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  # The whole episode replayed from the seed it started at, to the file's
  # return, along the file's observations.
  import re
  note = re.search(r'episode 1 \(seed (\d+)\): agent (\S+), expert replay '
                   r'(\S+) over 1000 steps \(the file: (\S+) over those '
                   r'steps, (\S+) over its episode; largest observation '
                   r'drift (\S+)\)', r.stdout)
  assert note, r.stdout
  file_return = demonstrations.load_for_environment(
      demos, 'cartpole:swingup').episode_returns[0]
  assert note.group(1) == '0'
  assert float(note.group(3)) == pytest.approx(file_return, abs=0.1)
  assert float(note.group(4)) == float(note.group(5)) == pytest.approx(
      file_return, abs=0.1)
  assert float(note.group(6)) < 1e-4
  with Image.open(out) as gif:
    assert gif.n_frames == 1000 // 100 + 1
    assert gif.size == (2 * 320, 240 + render.BAND)  # the agent left, the expert right
    gif.seek(5)
    frame = np.asarray(gif.convert('RGB'))[18:]
  left, right = frame[:, :320], frame[:, 320:]
  # Two scenes, each rendered, not the same picture twice.
  assert len(np.unique(right.reshape(-1, 3), axis=0)) > 20
  assert not np.array_equal(left, right)


def test_beside_expert_png_puts_the_expert_row_under_the_agents(
    ail_run, backend, tmp_path):
  from PIL import Image
  rd, _ = ail_run
  out = tmp_path / 'pair.png'
  r = _tandem('render', rd.root, '--beside_expert', '--steps', '20',
              '--every', '10', '--expert_episode', '1', '--out', str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  assert 'episode 1 (seed 1)' in r.stdout  # the file's second episode
  with Image.open(out) as png:
    assert png.size == (3 * 320, 2 * (240 + render.BAND))


@pytest.fixture(scope='module')
def moved_start(ail_run, tmp_path_factory):
  """The run's demonstrations with the cart of each episode's first
  observation moved: a start no seed resets to."""
  from tandem.agents.ail import demonstrations
  from tandem.agents.envs import environments
  _, demos = ail_run
  d = demonstrations.load_for_environment(demos, 'cartpole:swingup')
  observation = d.observation.copy()
  observation[d.step_index == 0, 0] += 0.5
  env = environments.make_environment('cartpole:swingup', seed=0)
  keys = demonstrations.observation_keys(env)
  env.close()
  path = str(tmp_path_factory.mktemp('moved') / 'moved.npz')
  demonstrations.save(path, d._replace(observation=observation), keys)
  return path


@pytest.mark.parametrize('args, named', [
    # Searching 100 seeds takes 13 s.
    pytest.param(['--demos', 'MOVED'], 'no environment seed',
                 marks=pytest.mark.slow),
    (['--expert_episode', '2'], 'hold 2 episodes'),
    (['--demos', '/nonexistent/demos.npz'], '/nonexistent/demos.npz'),
])
def test_beside_expert_refusals_are_named(ail_run, moved_start, tmp_path,
                                          args, named):
  rd, _ = ail_run
  args = [moved_start if a == 'MOVED' else a for a in args]
  r = _tandem('render', rd.root, '--beside_expert', '--steps', '10',
              '--out', str(tmp_path / 'x.gif'), *args)
  assert r.returncode == 2, r.stderr[-2000:]
  assert named in r.stderr and 'Traceback' not in r.stderr


def test_an_adversarial_run_is_shown_beside_its_expert_by_default(
    ail_run, backend, tmp_path):
  from PIL import Image
  rd, _ = ail_run
  out = tmp_path / 'default.gif'
  r = _tandem('render', rd.root, '--steps', '8', '--every', '4', '--out',
              str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  assert 'episode 1 (seed 0)' in r.stdout and 'beside' in r.stdout
  with Image.open(out) as gif:
    assert gif.size == (2 * 320, 240 + render.BAND)
  r = _tandem('render', rd.root, '--steps', '8', '--every', '4',
              '--no-beside_expert', '--out', str(out))
  assert r.returncode == 0 and 'beside' not in r.stdout, r.stderr[-2000:]
  with Image.open(out) as gif:
    assert gif.size == (320, 240 + render.BAND)
  # A run whose file is not on this machine: the agent alone, said why.
  gone = tmp_path / 'gone.npz'
  gone.write_bytes(open(ail_run[1], 'rb').read())
  lost = _untrained_run(tmp_path, 'lost', base=_ail_tiny(), demos=str(gone))
  gone.unlink()
  r = _tandem('render', lost.root, '--steps', '8', '--every', '4', '--out',
              str(out))
  assert r.returncode == 0, r.stderr[-2000:]
  assert 'the agent alone, not beside the expert' in r.stdout
  assert str(gone) in r.stdout


def _ail_tiny():
  from tandem.configs import ail as named_ail
  return named_ail.tiny()


def test_beside_expert_needs_demonstrations(run, tmp_path):
  r = _tandem('render', run.root, '--beside_expert', '--steps', '10',
              '--out', str(tmp_path / 'x.gif'))
  assert r.returncode == 2 and 'learned from no demonstrations' in r.stderr


@pytest.mark.parametrize('reads_all', [True, False])
def test_an_encoder_that_fails_leaves_no_mp4(tmp_path, monkeypatch,
                                             reads_all):
  # ffmpeg failing at its end (a full scratch disk when the file is
  # finished) or early: what it said comes back as an OSError, and no
  # file, half-written or not, is put in place.
  import imageio_ffmpeg
  from tandem.launch import render
  fake = tmp_path / 'ffmpeg'
  fake.write_text('#!/bin/sh\n' + ('cat > /dev/null\n' if reads_all else '')
                  + 'echo "Error writing trailer: No space left on device" >&2\n'
                  'exit 1\n')
  fake.chmod(0o755)
  monkeypatch.setattr(imageio_ffmpeg, 'get_ffmpeg_exe', lambda: str(fake))
  frames = [np.zeros((64, 64, 3), np.uint8)] * 200
  out = tmp_path / 'clip.mp4'
  with pytest.raises(OSError, match='exit status 1: Error writing trailer: '
                                    'No space left on device'):
    render.write_mp4(str(out), frames, fps=25)
  assert not out.exists()
