"""What a run's budget pays for, and the schedule horizons that follow it.

A learning-rate schedule runs over its group's `schedule_horizon`, counted in
that group's updates (generator/MPO steps, discriminator steps), because the
learner's state holds global update counts, not env steps. A horizon of 0
asks for "over the run": the updates the budget pays for, fixed when the run
is created and stored in its config.json, so a resume, even one that raises
the budget, keeps the schedule it started with.
"""

from __future__ import annotations

from tandem.launch import config as config_lib

# The config groups whose learners run schedules over `schedule_horizon`.
GROUPS = ('mpo', 'ail')


def expected_updates(cfg) -> dict:
  """The updates the budget lets the rate limiter pay for, by the count
  that keys each schedule: {'mpo': generator/MPO steps, 'ail':
  discriminator steps (adversarial runs only)}. Each sampled row is one
  batch element; an adversarial round splits its rows between the two.

    rows = (env_step_budget - replay_min_size) · samples_per_insert
    mpo  = rows / batch_size                                  (MPO runs)
    mpo  = R · generator_steps_per_round,
    ail  = R · discriminator_steps_per_round,                 (adversarial)
    R    = rows / (generator_steps_per_round · mpo.batch_size
                   + discriminator_steps_per_round · ail.batch_size)
  """
  rows = (cfg.env_step_budget - cfg.replay_min_size) * cfg.samples_per_insert
  if not isinstance(cfg, config_lib.AILTrainConfig):
    return {'mpo': rows / cfg.mpo.batch_size}
  a = cfg.ail
  gen = a.generator_steps_per_round * cfg.mpo.batch_size
  disc = a.discriminator_steps_per_round * a.batch_size
  rounds = rows / (gen + disc)
  return {'mpo': rounds * a.generator_steps_per_round,
          'ail': rounds * a.discriminator_steps_per_round}


def over_the_budget(cfg):
  """`cfg` with each `schedule_horizon` of 0 set to the updates its budget
  pays for (rounded, at least 1); other horizons as they are. A learner
  refuses a horizon of 0, so every launch passes its config through here."""
  updates = expected_updates(cfg)
  fixed = {f'{group}.schedule_horizon': max(1, round(updates[group]))
           for group in GROUPS
           if group in updates and getattr(cfg, group).schedule_horizon == 0}
  return config_lib.apply_overrides(cfg, fixed) if fixed else cfg
