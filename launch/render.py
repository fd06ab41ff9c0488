"""`tandem render`: what a run's policy does, as a video (.gif, .mp4) or a
strip of frames (.png).

The run's mean-action policy (as its evaluator acts) from one of its
checkpoints, in the run's own environment, rendered off-screen; each frame
carries the episode, its env step and the return so far. A .gif or .mp4
output animates every frame taken, at 25 frames/s; a .png output lays them
side by side in one row (a strip for a page: choose --steps and --every for
a few frames).

An adversarial run is shown beside its expert (--beside_expert, the
default for these where the run's demonstration file is at hand): each
episode starts where one of the expert's demonstration episodes started,
and that episode's actions are replayed beside the agent
(expert_replay.py): left and right in a video, the expert's row under the
agent's in a .png. Where the file is missing or no start matches, the
agent is drawn alone and the output says why; --no-beside_expert draws it
alone from the start, and --beside_expert makes either a refusal.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import warnings

import numpy as np

from tandem.launch import resolve
from tandem.launch.errors import EXIT_OK, UsageError, require_writable_dir

HEIGHT, WIDTH = 240, 320   # a dm_control frame unless --size says
MAX_SIDE = 4096
BAND = 24  # pixels of caption above each frame
FONT_SIZES = range(17, 8, -1)  # the largest whose caption fits the frame
MAX_STRIP = 12  # frames in one .png row
FRAME_MS = 40   # each frame of an animation: 25 frames/s
OUTPUTS = ('.gif', '.mp4', '.png')


def pick_checkpoint(rd, which: str) -> str:
  """'latest' or a learner step count -> that learner checkpoint's path."""
  from tandem.agents.core import checkpointing
  found = checkpointing.list_checkpoints(rd.learner_checkpoints)
  if not found:
    raise UsageError(f'{rd.root}: no learner checkpoint in '
                     f'{rd.learner_checkpoints}')
  if which == 'latest':
    return found[-1]
  if not re.fullmatch(r'\d+', which):
    raise UsageError(f"--checkpoint: expected 'latest' or a learner step "
                     f'count, got {which!r}')
  path = checkpointing.numbered_path(rd.learner_checkpoints, int(which))
  if path not in found:
    steps = [int(re.search(r'(\d+)\.npz$', p).group(1)) for p in found]
    raise UsageError(f'--checkpoint {which}: no such checkpoint; this run has '
                     f'learner steps {steps}')
  return path


def parse_size(text: str) -> tuple[int, int]:
  """'WIDTHxHEIGHT' -> (width, height), each 16..MAX_SIDE pixels."""
  m = re.fullmatch(r'(\d+)x(\d+)', text.strip())
  if not m or not all(16 <= int(v) <= MAX_SIDE for v in m.groups()):
    raise UsageError(f'--size: expected WIDTHxHEIGHT in pixels, each 16 to '
                     f'{MAX_SIDE}, such as 640x480; got {text!r}')
  return int(m.group(1)), int(m.group(2))


def _check_args(args) -> str:
  """The output path, after every argument is checked (before any work)."""
  if ((args.demos or args.expert_episode is not None) and
      args.beside_expert is False):
    raise UsageError('--demos and --expert_episode show the expert; they do '
                     'not go with --no-beside_expert')
  if args.size is not None:
    parse_size(args.size)
  for name in ('episodes', 'every'):
    if getattr(args, name) < 1:
      raise UsageError(f'--{name}: expected an integer >= 1, got '
                       f'{getattr(args, name)}')
  if args.steps is not None and args.steps < 1:
    raise UsageError(f'--steps: expected an integer >= 1, got {args.steps}')
  out = args.out
  if out is None:
    out = os.path.join(args.run_dir, f'render-{args.checkpoint}.gif')
  if not out.endswith(OUTPUTS):
    raise UsageError(f'--out {out}: expected a .gif or .mp4 file (animated) '
                     'or a .png file (the frames in a row)')
  if out.endswith('.png'):
    # Frames at steps 0, every, 2 every, ... and the last step taken.
    per_episode = None if args.steps is None else (
        args.steps // args.every + 1 + (args.steps % args.every > 0))
    if per_episode is None or per_episode * args.episodes > MAX_STRIP:
      raise UsageError(f'--out {out}: a .png strip holds at most {MAX_STRIP} '
                       'frames; give --steps and --every for fewer (frames '
                       'per episode: steps 0, every, 2 x every, ... up to '
                       '--steps)')
  require_writable_dir(out)
  if os.path.islink(out):
    raise UsageError(f'--out {out} is a symbolic link; tandem render writes '
                     'only regular files')
  return out


def captioned(image: np.ndarray, text: str) -> np.ndarray:
  """image [H, W, 3] uint8 with a band of `text` above it, in the largest
  of FONT_SIZES that fits the frame's width (readable where a page shows a
  strip at two thirds of its size)."""
  from PIL import Image, ImageDraw
  h, w, _ = image.shape
  canvas = Image.new('RGB', (w, h + BAND), (255, 255, 255))
  canvas.paste(Image.fromarray(image), (0, BAND))
  draw = ImageDraw.Draw(canvas)
  for size in FONT_SIZES:
    font = _font(size)
    if draw.textlength(text, font=font) <= w - 8:
      break
  draw.text((4, 2), text, fill=(0, 0, 0), font=font)
  return np.asarray(canvas)


@functools.cache
def _font(size: int):
  """Pillow's own font at `size` pixels, loaded once per size (a load per
  captioned frame cost about as much as the caption)."""
  from PIL import ImageFont
  return ImageFont.load_default(size=size)


def scene(env, size) -> np.ndarray:
  """The environment's current frame [H, W, 3] uint8 at `size` (width,
  height): dm_control draws at it, a gymnasium frame is scaled to it. None:
  dm_control at WIDTH x HEIGHT, gymnasium at its own size."""
  from tandem.agents.envs import rendering
  width, height = size or (WIDTH, HEIGHT)
  image = rendering.frame(env, height, width)
  if size is not None and image.shape[:2] != (height, width):
    from PIL import Image
    image = np.asarray(Image.fromarray(image).resize(
        (width, height), Image.Resampling.LANCZOS))
  return image


def episodes_frames(env, actor, *, episodes: int, every: int, steps,
                    label: str = 'episode 1', size=None):
  """Captioned frames of `episodes` episodes (every `every`-th step, and
  each episode's last), and each episode's return. `label` names the first
  episode in the captions (its number counts up); `size`: as `scene`."""
  frames, returns = [], []
  head, _, number = label.rpartition(' ')
  for episode in range(episodes):
    timestep, total, step = env.reset(), 0.0, 0
    name = f'{head} {int(number) + episode}'.strip()
    while True:
      last = timestep.last() or (steps is not None and step >= steps)
      if step % every == 0 or last:
        frames.append(captioned(
            scene(env, size),
            f'{name}  step {step}  return {total:.1f}'))
      if last:
        break
      timestep = env.step(np.asarray(
          actor.select_action(np.asarray(timestep.observation, np.float32)),
          np.float32))
      total += float(timestep.reward or 0.0)
      step += 1
    returns.append(total)
  return frames, returns


def write_gif(path: str, frames: list, frame_ms: int) -> None:
  """An animated GIF of `frames`, written whole or not at all."""
  from PIL import Image
  from tandem.agents.core import files
  images = [Image.fromarray(f) for f in frames]
  files.write_atomic(path, lambda f: images[0].save(
      f, format='GIF', save_all=True, append_images=images[1:],
      duration=frame_ms, loop=0))


def write_mp4(path: str, frames: list, fps: int) -> None:
  """An H.264 MP4 of `frames` (yuv420p: what browsers and players take),
  written whole or not at all. The encoder is the ffmpeg that the
  imageio-ffmpeg wheel carries (requirements.lock), so no system package is
  needed; it writes into a scratch folder, and only a file it finished
  (exit status 0) is copied into place, atomically; otherwise an OSError
  carries what ffmpeg said. yuv420p needs even sides: an odd one is padded
  with a white row or column rather than rescaled."""
  import shutil
  import subprocess
  import tempfile
  import imageio_ffmpeg
  from tandem.agents.core import files
  h, w = frames[0].shape[:2]

  def even(frame):
    return np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)),
                  constant_values=255)
  with tempfile.TemporaryDirectory(prefix='tandem-render-') as scratch:
    encoded = os.path.join(scratch, 'video.mp4')
    command = [
        imageio_ffmpeg.get_ffmpeg_exe(), '-y', '-v', 'error',
        '-f', 'rawvideo', '-pix_fmt', 'rgb24',
        '-s', f'{w + w % 2}x{h + h % 2}', '-r', str(fps), '-i', '-',
        '-an', '-c:v', 'libx264', '-pix_fmt', 'yuv420p', encoded]
    # ffmpeg's messages go to a file: a pipe nobody reads while the frames
    # are written could fill and stall it.
    with open(os.path.join(scratch, 'ffmpeg.log'), 'w+b') as log:
      with quiet_fork_warning():
        encoder = subprocess.Popen(command, stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=log)
      try:
        for frame in frames:
          encoder.stdin.write(np.ascontiguousarray(even(frame)).tobytes())
      except BrokenPipeError:
        pass  # ffmpeg ended early; its status and message say why
      finally:
        try:
          encoder.stdin.close()  # the end of the input: ffmpeg finishes
        except BrokenPipeError:
          pass
        status = encoder.wait()
      if status != 0:
        log.seek(0)
        said = log.read().decode(errors='replace').strip().splitlines()
        raise OSError(f'ffmpeg ended with exit status {status}'
                      f"{': ' + said[-1] if said else ''}")
    with open(encoded, 'rb') as src:
      files.write_atomic(path, lambda f: shutil.copyfileobj(src, f))


@contextlib.contextmanager
def quiet_fork_warning():
  """Silences JAX's warning that a fork in a multithreaded process may
  deadlock, for a subprocess start: subprocess forks and execs in C, so
  the child runs no Python and takes no lock (the restored checkpoint has
  loaded JAX by then)."""
  with warnings.catch_warnings():
    warnings.filterwarnings('ignore', message=r'os\.fork\(\) was called',
                            category=RuntimeWarning)
    yield


def write_video(path: str, frames: list) -> None:
  """The animation `frames` make, as `path`'s suffix says: .gif or .mp4,
  each frame shown FRAME_MS."""
  if path.endswith('.mp4'):
    write_mp4(path, frames, fps=1000 // FRAME_MS)
  else:
    write_gif(path, frames, frame_ms=FRAME_MS)


def write_strip(path: str, frames: list, *more_rows: list) -> None:
  """The frames side by side in one PNG (each further list of frames a row
  below), written whole or not at all."""
  from PIL import Image
  from tandem.agents.core import files
  strip = Image.fromarray(np.concatenate(
      [np.concatenate(row, axis=1) for row in (frames, *more_rows)], axis=0))
  files.write_atomic(path, lambda f: strip.save(f, format='PNG',
                                                optimize=True))


def render_run(args) -> int:
  """Reads the run, finds a back end, restores the checkpoint, draws the
  episodes (beside the expert where that applies) and writes them."""
  from tandem.agents.envs import rendering
  from tandem.agents.runtime.rundir import RunDir
  rd = RunDir(os.path.abspath(args.run_dir))
  if not os.path.isfile(rd.config):
    raise UsageError(f'{args.run_dir}: no config.json there; is it a Tandem '
                     'run directory?')
  out = _check_args(args)
  size = None if args.size is None else parse_size(args.size)
  cfg = resolve.load_run_config_to_read(rd.config, args.run_dir)
  checkpoint = pick_checkpoint(rd, args.checkpoint)
  try:
    backend = (f'MUJOCO_GL={rendering.choose_backend()}'
               if rendering.needs_mujoco_gl(cfg.env) else
               "gymnasium's own renderer")
  except rendering.RenderingUnavailable as e:
    raise UsageError(f'tandem render: {e}') from e
  actor = _restored_actor(args, cfg, checkpoint)
  try:
    expert = _expert_plan(args, cfg)
    if expert is not None:
      return _render_beside_expert(args, cfg, actor, out, checkpoint,
                                   backend, size, *expert)
    frames, returns = _agent_frames(args, cfg, actor, args.seed,
                                    episodes=args.episodes, size=size)
  except rendering.RenderingUnavailable as e:
    raise UsageError(f'tandem render: {cfg.env}: {e}') from e
  _write(out, frames)
  print(f'{out}: {len(frames)} frames of {args.episodes} episode(s) of '
        f'{cfg.env} from {checkpoint} ({backend}); returns '
        + ', '.join(f'{r:.1f}' for r in returns))
  return EXIT_OK


def _restored_actor(args, cfg, checkpoint: str):
  """The evaluator's mean-action actor of the checkpoint's policy."""
  from tandem.agents.mpo import actor as actor_lib
  program, state = resolve.restore_learner_state(cfg, checkpoint,
                                                 args.run_dir)
  return actor_lib.Actor(cfg.mpo, program.policy_of(cfg, state),
                         seed=args.seed, deterministic=True)


def _write(out: str, frames: list, *more_rows: list) -> None:
  """The frames as `out`'s suffix says; a UsageError naming --out where the
  write fails (a full disk, say): nothing is left half-written."""
  try:
    if out.endswith('.png'):
      write_strip(out, frames, *more_rows)
    else:
      write_video(out, frames)
  except OSError as e:
    raise UsageError(f'--out {out}: cannot write it ({e.strerror or e})'
                     ) from e


def _agent_frames(args, cfg, actor, seed: int, *, episodes: int,
                  label: str = 'episode 1', size=None):
  env = _make(cfg, seed, render=True)
  try:
    return episodes_frames(env, actor, episodes=episodes, every=args.every,
                           steps=args.steps, label=label, size=size)
  finally:
    env.close()


def _expert_plan(args, cfg):
  """(file, [(episode, start seed)]) to draw the expert beside the agent,
  or None to draw the agent alone. --beside_expert (or --demos, or
  --expert_episode) asks for it, and anything in its way is a UsageError;
  by default an adversarial run gets it where its file is at hand and each
  start is found, and otherwise a note says why the agent is alone."""
  from tandem.launch import expert_replay
  asked = (args.beside_expert or args.demos is not None or
           args.expert_episode is not None)
  if args.beside_expert is False or not (asked or getattr(cfg, 'demos', '')):
    return None
  try:
    path, demos = _expert_demos(args, cfg)
    episodes = expert_replay.episodes_of(demos, args.expert_episode or 0,
                                         args.episodes)
    plan = [(e, expert_replay.start_seed(
        lambda seed, **kw: _make(cfg, seed, **kw), e)) for e in episodes]
  except UsageError as e:
    if asked:
      raise
    why = str(e).removeprefix('--beside_expert: ')
    print(f'the agent alone, not beside the expert: {why}')
    return None
  return path, plan


def _make(cfg, seed: int, **kw):
  from tandem.agents.envs import environments
  return environments.make_environment(cfg.env, seed=seed, **kw)


def _expert_demos(args, cfg):
  """The demonstrations to replay: --demos, else the run's own file."""
  from tandem.agents.ail import demonstrations
  from tandem.agents.ail.demo_format import DemoError
  path = args.demos or getattr(cfg, 'demos', '')
  if not path:
    raise UsageError(f'--beside_expert: {args.run_dir} learned from no '
                     'demonstrations (an MPO run); name a file with --demos')
  try:
    return path, demonstrations.load_for_environment(path, cfg.env)
  except (OSError, DemoError, ValueError) as e:
    raise UsageError(f'--beside_expert: {path}: {e}') from e


def _render_beside_expert(args, cfg, actor, out: str, checkpoint: str,
                          backend: str, size, path: str, plan: list) -> int:
  from tandem.launch import expert_replay
  agent_row, expert_row, gif, notes = [], [], [], []
  for k, (episode, seed) in enumerate(plan):
    agent, returns = _agent_frames(args, cfg, actor, seed, episodes=1,
                                   label=f'agent, episode {k + 1}',
                                   size=size)
    env = _make(cfg, seed, render=True)
    caption = f'expert demo {episode.index}'
    try:
      replayed = expert_replay.replay(
          env, episode, lambda e, step, total, caption=caption: captioned(
              scene(e, size), f'{caption}  step {step}  return {total:.1f}'),
          every=args.every, steps=args.steps)
    finally:
      env.close()
    agent, expert = expert_replay.padded(agent, replayed.frames)
    gif.extend(expert_replay.pair(agent, expert))
    agent_row.extend(agent)
    expert_row.extend(expert)
    notes.append(f'episode {k + 1} (seed {seed}): agent {returns[0]:.1f}, '
                 f'expert replay {replayed.replay_return:.1f} over '
                 f'{replayed.steps} steps (the file: '
                 f'{replayed.file_return(episode):.1f} over those steps, '
                 f'{episode.file_return:.1f} over its episode; largest '
                 f'observation drift {replayed.drift:.2g})')
  if out.endswith('.png'):
    _write(out, agent_row, expert_row)
  else:
    _write(out, gif)
  print(f'{out}: {len(gif)} frames of {len(plan)} episode(s) of '
        f'{cfg.env} from {checkpoint}, beside {path} ({backend})\n'
        + '\n'.join(notes))
  return EXIT_OK
