"""The global counter: counts and wall time survive save/restore."""

import json
import os

import pytest

from tandem.agents.runtime import counting


class FakeClock:
  def __init__(self):
    self.t = 100.0

  def __call__(self):
    return self.t


def test_counts_and_elapsed_time_survive_restart(tmp_path):
  path = str(tmp_path / 'counter.json')
  clock = FakeClock()
  c = counting.Counter(path, clock=clock)
  c.increment(env_steps=500, episodes=1)
  c.increment(learner_steps=60)
  clock.t += 30.0
  c.set_extra(last_eval_return=12.5)
  c.save()
  clock2 = FakeClock()
  clock2.t = 5.0  # a new process: its own monotonic clock
  r = counting.Counter(path, restore=True, clock=clock2)
  clock2.t += 10.0
  counts = r.get_counts()
  assert counts['env_steps'] == 500 and counts['learner_steps'] == 60
  assert counts['episodes'] == 1
  assert counts['elapsed_s'] == pytest.approx(40.0)  # 30 before + 10 after
  assert r.get_extra()['last_eval_return'] == 12.5


def test_unknown_count_and_bad_files_are_rejected(tmp_path):
  c = counting.Counter()
  with pytest.raises(KeyError, match='env_step'):
    c.increment(env_step=1)
  with pytest.raises(counting.CounterStateError, match='no such file'):
    counting.Counter(str(tmp_path / 'missing.json'), restore=True)
  bad = tmp_path / 'bad.json'
  bad.write_text('{"counts": ')
  with pytest.raises(counting.CounterStateError, match='bad.json'):
    counting.Counter(str(bad), restore=True)


@pytest.mark.parametrize('text', [
    '[1, 2]', '{"counts": [1], "elapsed_s": 0}',
    '{"counts": {"env_steps": "many"}, "elapsed_s": 0}',
    '{"counts": {}, "elapsed_s": 0, "extra": 3}',
    # Readable, but values a resume would carry into every rate and budget.
    '{"counts": {"env_steps": -500}, "elapsed_s": 0}',
    '{"counts": {"env_steps": true}, "elapsed_s": 0}',
    '{"counts": {"env_steps": 12.9}, "elapsed_s": 0}',
    '{"counts": {"env_steps": 1e300}, "elapsed_s": 0}',
    '{"counts": {"env_steps": Infinity}, "elapsed_s": 0}',
    '{"counts": {"env_steps": NaN}, "elapsed_s": 0}',
    '{"counts": {"bogus": 3}, "elapsed_s": 0}',
    '{"counts": {"env_steps": 3}, "elapsed_s": NaN}',
    '{"counts": {"env_steps": 3}, "elapsed_s": Infinity}',
    '{"counts": {"env_steps": 3}, "elapsed_s": -1.0}',
    '{"counts": {"env_steps": 3}, "elapsed_s": "12"}'])
def test_counter_files_of_the_wrong_shape_are_rejected_by_name(tmp_path,
                                                               text):
  # Valid JSON of the wrong shape, not only broken JSON, is refused as a
  # CounterStateError (the CLI turns that into a usage error before launch).
  bad = tmp_path / 'shape.json'
  bad.write_text(text)
  with pytest.raises(counting.CounterStateError, match='shape.json'):
    counting.Counter(str(bad), restore=True)


def test_rates_use_global_elapsed_time():
  a = {'env_steps': 0, 'learner_steps': 0, 'discriminator_steps': 0,
       'elapsed_s': 10.0}
  b = {'env_steps': 1000, 'learner_steps': 100, 'discriminator_steps': 30,
       'elapsed_s': 20.0}
  r = counting.rates(a, b)
  assert r == {'env_steps_per_s': 100.0, 'learner_steps_per_s': 10.0,
               'discriminator_steps_per_s': 3.0}


def test_save_is_atomic_and_keeps_the_old_file_on_failure(tmp_path,
                                                          monkeypatch):
  path = tmp_path / 'counter.json'
  c = counting.Counter(str(path))
  c.increment(env_steps=3)
  c.save()
  c.increment(env_steps=4)

  def disk_fails(fd):
    raise OSError(28, 'No space left on device')
  # The new contents are written to a temporary file before fsync fails.
  monkeypatch.setattr(os, 'fsync', disk_fails)
  with pytest.raises(OSError):
    c.save()
  monkeypatch.undo()
  assert json.loads(path.read_text())['counts']['env_steps'] == 3
  assert [p.name for p in tmp_path.iterdir()] == ['counter.json']
  c.save()
  assert json.loads(path.read_text())['counts']['env_steps'] == 7


def test_rounds_never_reset_a_count_or_the_clock(tmp_path):
  # R rounds of an adversarial learner with a restart in the middle: fps
  # after round k is global env steps over the time since the *first*
  # start, discriminator time included (the anti-example restarts fps at
  # every round's learn() call).
  path = str(tmp_path / 'counter.json')
  clock = FakeClock()
  c = counting.Counter(path, clock=clock)
  env_steps = seconds = 0
  for k in range(1, 7):
    if k == 4:  # stop and resume: a new process with its own clock
      c.save()
      clock = FakeClock()
      clock.t = 7.0
      c = counting.Counter(path, restore=True, clock=clock)
    clock.t += 3.0   # discriminator phase: no env steps, time passes
    seconds += 3.0
    c.increment(discriminator_steps=2)
    clock.t += 5.0   # generator phase, actors acting
    seconds += 5.0
    env_steps += 400
    counts = c.increment(env_steps=400, learner_steps=8, rounds=1)
    assert counts['rounds'] == k
    assert counts['discriminator_steps'] == 2 * k
    assert counts['learner_steps'] == 8 * k
    fps = counting.since_start(counts)
    assert fps['env_steps_per_s_since_start'] == pytest.approx(
        env_steps / seconds)
    assert fps['discriminator_steps_per_s_since_start'] == pytest.approx(
        2 * k / seconds)


def test_set_counts_overwrites_named_counts_only():
  c = counting.Counter()
  c.increment(env_steps=10, learner_steps=7, rounds=2)
  counts = c.set_counts(learner_steps=5, discriminator_steps=4)
  assert (counts['env_steps'], counts['learner_steps'],
          counts['discriminator_steps'], counts['rounds']) == (10, 5, 4, 2)
  with pytest.raises(KeyError, match='learner_step'):
    c.set_counts(learner_step=1)
