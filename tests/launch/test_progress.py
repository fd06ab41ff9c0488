"""The launcher's live status: a bar rewritten in place on a terminal,
plain lines elsewhere."""

import json
import os
import pty
import subprocess
import sys
import tty

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


def _watch(tmp_path, on_a_terminal: bool, seconds: float = 1.0) -> str:
  path = tmp_path / 'progress.json'
  path.write_text(json.dumps(PROGRESS))
  args = [sys.executable, '-c', _WATCHER, str(path), str(seconds)]
  if not on_a_terminal:
    done = subprocess.run(args, stdout=subprocess.PIPE, timeout=60,
                          check=True)
    return done.stdout.decode()
  main, child = pty.openpty()
  tty.setraw(child)  # bytes as written: no \n -> \r\n translation
  proc = subprocess.Popen(args, stdout=child, close_fds=True)
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


def test_on_a_terminal_one_line_is_rewritten_in_place(tmp_path):
  text = _watch(tmp_path, on_a_terminal=True)
  updates = text.split('\r')[1:]
  assert len(updates) >= 3
  assert all(u.startswith('[#########---------------]  38% env steps')
             for u in updates)
  assert all(u.rstrip('\n').endswith('\x1b[K') for u in updates)
  assert '52.0 s' not in text and '0.9 min' in text  # time to the budget
  assert text.count('\n') == 1 and text.endswith('\n')  # once, at the end


def test_elsewhere_each_update_is_a_plain_line(tmp_path):
  text = _watch(tmp_path, on_a_terminal=False)
  lines = text.splitlines()
  assert len(lines) >= 3 and '\r' not in text and '[#' not in text
  assert '\x1b' not in text
  assert all(line.startswith('env steps     3750/10000') for line in lines)
