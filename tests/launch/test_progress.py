"""The launcher's live status: a bar rewritten in place on a terminal,
plain lines elsewhere."""

import io
import json
import threading
import time

from tandem.launch import supervise

PROGRESS = {'counts': {'env_steps': 3750}, 'budget': 10000,
            'env_steps_per_s': 120.0, 'learner_steps_per_s': 9.0,
            'last_eval_return': 321.5, 'eta_s': 52.0}


def test_the_bar_shows_the_share_of_the_budget():
  # 3750 of 10000: 3 of 8 marks.
  assert supervise.progress_bar(PROGRESS, width=8) == '[###-----]  38%'
  done = dict(PROGRESS, counts={'env_steps': 12000})
  assert supervise.progress_bar(done, width=4) == '[####] 100%'


class _Terminal(io.StringIO):
  def __init__(self, tty):
    super().__init__()
    self._tty = tty

  def isatty(self):
    return self._tty


def _watch(tmp_path, monkeypatch, tty: bool) -> str:
  path = tmp_path / 'progress.json'
  path.write_text(json.dumps(PROGRESS))
  out = _Terminal(tty)
  monkeypatch.setattr('sys.stdout', out)
  stop = threading.Event()
  watcher = threading.Thread(target=supervise.watch_progress,
                             args=(str(path), stop, 0.05))
  watcher.start()
  deadline = time.monotonic() + 30
  while (out.getvalue().count('env steps') < 3 and
         time.monotonic() < deadline):
    time.sleep(0.05)
  stop.set()
  watcher.join(timeout=10)
  return out.getvalue()


def test_on_a_terminal_one_line_is_rewritten_in_place(tmp_path, monkeypatch):
  text = _watch(tmp_path, monkeypatch, tty=True)
  updates = text.split('\r')[1:]
  assert len(updates) >= 3
  assert all(u.startswith('[#########---------------]  38% env steps')
             for u in updates)
  assert '52.0 s' not in text and '0.9 min' in text  # time to the budget
  assert text.count('\n') == 1 and text.endswith('\n')  # once, at the end


def test_elsewhere_each_update_is_a_plain_line(tmp_path, monkeypatch):
  text = _watch(tmp_path, monkeypatch, tty=False)
  lines = text.splitlines()
  assert len(lines) >= 3 and '\r' not in text and '[#' not in text
  assert all(line.startswith('env steps     3750/10000') for line in lines)
