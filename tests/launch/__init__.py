"""Helpers shared by the launch tests."""

import json

import pytest

from tandem.launch import config as config_lib


def make_config_stale(path: str) -> dict:
  """Rewrites the run config at `path` with an actor refresh period longer
  than an actor's share of the budget: a config.json TrainConfig refuses but
  an older Tandem may have written. Returns the data."""
  with open(path) as f:
    data = json.load(f)
  data['actor_update_period'] = data['env_step_budget'] + 1
  with open(path, 'w') as f:
    json.dump(data, f)
  with pytest.raises(config_lib.ConfigError):
    config_lib.from_dict(data)
  return data
