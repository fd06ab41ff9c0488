"""Programs as values (launch/programs.py): each command's Program, and the
command of each config class."""

import dataclasses

import pytest

from tandem.configs import ail as ail_configs
from tandem.configs import mpo as mpo_configs
from tandem.launch import config as config_lib
from tandem.launch import programs


@pytest.mark.parametrize('command,config_class', [
    ('train', config_lib.TrainConfig),
    ('train-ail', config_lib.AILTrainConfig)])
def test_each_command_has_the_program_of_its_config_class(command,
                                                           config_class):
  program = programs.for_command(command)
  assert program.command == command
  assert program.config_class is config_class
  assert programs.command_of(config_class) == command
  assert programs.for_config(config_class()) is program


def test_only_the_imitation_program_checks_demonstrations():
  assert programs.for_command('train').check_demonstrations is None
  assert programs.for_command('train-ail').check_demonstrations is not None


def test_a_config_subclass_belongs_to_its_base_programs_command():
  # A named config may return its own subclass of a run config.
  @dataclasses.dataclass(frozen=True)
  class Longer(config_lib.AILTrainConfig):
    pass

  assert programs.command_of(Longer) == 'train-ail'
  assert programs.command_of(type(mpo_configs.tiny())) == 'train'
  assert programs.command_of(type(ail_configs.tiny())) == 'train-ail'
