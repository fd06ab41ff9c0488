"""The launcher's live status: a bar rewritten in place on a terminal,
plain lines elsewhere."""

import json
import os
import pty
import fcntl
import struct
import subprocess
import sys
import termios
import tty

import pytest

from tandem.launch import supervise

PROGRESS = {'counts': {'env_steps': 3750}, 'budget': 10000,
            'env_steps_per_s': 120.0, 'learner_steps_per_s': 9.0,
            'last_eval_return': 321.5, 'eta_s': 52.0}


def test_the_bar_shows_the_share_of_the_budget():
  # 3750 of 10000: 3 of 8 marks.
  assert supervise.progress_bar(PROGRESS, width=8) == '[###-----]  38%'
  done = dict(PROGRESS, counts={'env_steps': 12000})
  assert supervise.progress_bar(done, width=4) == '[####] 100%'


# The watcher in a process of its own, its stdout a real terminal or a pipe:
# it stops itself after `seconds`, having shown the file every 0.05 s.
_WATCHER = """
import sys, threading
from tandem.launch import supervise
stop = threading.Event()
threading.Timer(float(sys.argv[2]), stop.set).start()
supervise.watch_progress(sys.argv[1], stop, 0.05)
"""


def _watch(tmp_path, on_a_terminal: bool, seconds: float = 1.0,
           columns: int = 200, progress: dict = PROGRESS) -> str:
  path = tmp_path / 'progress.json'
  path.write_text(json.dumps(progress))
  args = [sys.executable, '-c', _WATCHER, str(path), str(seconds)]
  env = {k: v for k, v in os.environ.items() if k not in ('COLUMNS', 'LINES')}
  if not on_a_terminal:
    done = subprocess.run(args, stdout=subprocess.PIPE, timeout=60,
                          check=True, env=env)
    return done.stdout.decode()
  main, child = pty.openpty()
  tty.setraw(child)  # bytes as written: no \n -> \r\n translation
  fcntl.ioctl(child, termios.TIOCSWINSZ,
              struct.pack('HHHH', 24, columns, 0, 0))
  proc = subprocess.Popen(args, stdout=child, close_fds=True, env=env)
  os.close(child)
  out = b''
  while True:
    try:
      chunk = os.read(main, 4096)
    except OSError:  # EIO: the child's side of the terminal is closed
      break
    if not chunk:
      break
    out += chunk
  os.close(main)
  assert proc.wait(timeout=60) == 0
  return out.decode()


def _updates(text: str) -> list:
  """What each in-place update drew: the text after each line clear."""
  return [u.rstrip('\n') for u in text.split(supervise.CLEAR_LINE)[1:]]


def test_on_a_terminal_one_line_is_rewritten_in_place(tmp_path):
  text = _watch(tmp_path, on_a_terminal=True)
  updates = _updates(text)
  assert len(updates) >= 3
  assert all(u == '[#########---------------]  38% ' +
             supervise.progress_line(PROGRESS) for u in updates)
  assert '52.0 s' not in text and '0.9 min' in text  # time to the budget
  assert text.count('\n') == 1 and text.endswith('\n')  # once, at the end


@pytest.mark.parametrize('columns', [80, 30])
def test_on_a_narrow_terminal_the_line_never_wraps(tmp_path, columns):
  # A line as wide as the terminal wraps, and \r then returns to its
  # last row only: every update would add a row.
  adversarial = dict(PROGRESS, counts={'env_steps': 3750,
                                       'discriminator_steps': 90},
                     discriminator_steps_per_s=2.0)
  updates = _updates(_watch(tmp_path, on_a_terminal=True, columns=columns,
                            progress=adversarial))
  assert len(updates) >= 3
  assert all(len(u) < columns for u in updates), updates[0]
  if columns >= 80:  # what matters most is all there
    assert updates[0].startswith('[####------]  38% 3750/10000 steps')
    assert 'eval 321.5' in updates[0] and '0.9 min left' in updates[0]


def test_the_learner_device_gets_a_line_of_its_own(tmp_path):
  progress = dict(PROGRESS, learner_device='cuda:0')
  text = _watch(tmp_path, on_a_terminal=True, progress=progress)
  lines = text.split('\n')
  assert lines[0].endswith('learner device: cuda:0')
  assert lines.count('') == 1 and text.count('learner device') == 1
  # ... above the bar, which goes on updating below it.
  assert len(_updates(lines[1])) >= 2


def test_elsewhere_each_update_is_a_plain_line(tmp_path):
  text = _watch(tmp_path, on_a_terminal=False)
  lines = text.splitlines()
  assert len(lines) >= 3 and '\r' not in text and '[#' not in text
  assert '\x1b' not in text
  assert all(line.startswith('env steps     3750/10000') for line in lines)
