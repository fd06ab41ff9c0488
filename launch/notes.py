"""Notes printed before a launch: settings that are valid but would waste
the run (an annealing horizon far from the updates the budget pays for, a
resume that leaves the learner no step)."""

from __future__ import annotations

from typing import Optional

from tandem.launch import config as config_lib
from tandem.launch import horizons


def schedule_note(cfg) -> Optional[str]:
  """A warning when an annealing horizon is far from the updates the budget
  pays for: with a horizon twice as long, the run ends before half the
  schedule; with one half as long, the value sits at its final one for more
  than half the run. Learning-rate schedules run over their group's
  schedule_horizon; the adversarial behaviour-cloning weight over
  ail.bc_decay_steps generator steps. A BC weight that falls to a floor
  above 0 is meant to hold there, so an early end of its fall is not noted.
  Neither horizon changes on resume, so a resume that extends the budget
  warns too."""
  cfg = horizons.over_the_budget(cfg)  # a horizon of 0 is the budget's
  updates = horizons.expected_updates(cfg)
  anneals = []  # (what, horizon field, horizon, updates paid for, note early end)
  fields = config_lib.leaf_fields(cfg)
  for path, kind in fields.items():
    if not path.endswith('.schedule') or kind == 'constant':
      continue
    if fields[path[:-len('schedule')] + 'final_fraction'] == 1.0:
      continue  # it ends where it starts: a constant rate
    group = path.split('.')[0]
    anneals.append((f'{path}={kind}', f'{group}.schedule_horizon',
                    getattr(cfg, group).schedule_horizon, updates[group],
                    True))
  ail = getattr(cfg, 'ail', None)
  if ail is not None and ail.bc_weight > 0 and \
      ail.bc_final_weight != ail.bc_weight:
    anneals.append(('ail.bc_weight', 'ail.bc_decay_steps',
                    ail.bc_decay_steps, updates['mpo'],
                    ail.bc_final_weight == 0))
  notes = []
  for what, name, horizon, steps, note_early_end in anneals:
    if horizon > 2 * steps:
      notes.append(f'{what} runs over {name}={horizon} steps, but the '
                   f'budget pays for about {steps:.0f}: the run ends '
                   f'{100 * steps / horizon:.0f}% of the way through it')
    elif horizon < steps / 2 and note_early_end:
      notes.append(f'{what} reaches its final value at {name}={horizon} '
                   f'steps, {100 * horizon / steps:.0f}% of the about '
                   f'{steps:.0f} the budget pays for')
  if not notes:
    return None
  return ('note: ' + '; '.join(notes) + ' ((env_step_budget - '
          'replay_min_size) · samples_per_insert rows sampled). The horizon '
          'is fixed for the run; set it at launch (0: what the budget pays '
          'for) to change this.')


def empty_replay_note(cfg, rd) -> Optional[str]:
  """A warning when a resume starts from an empty buffer with no more of
  the budget left than replay_min_size: the learner would not step again."""
  from tandem.agents.runtime import counting
  env_steps = counting.Counter(rd.counter, restore=True).get_counts()[
      'env_steps']
  left = cfg.env_step_budget - env_steps
  if not 0 < left <= cfg.replay_min_size:
    return None
  return (f'note: replay starts empty and {left} env steps of the budget are '
          f'left, not more than replay_min_size={cfg.replay_min_size}: the '
          'learner will take no step before the final evaluation; raise '
          '--env_step_budget to train on')
