"""The programs Tandem launches, each a value the launcher can inspect.

A `Program` holds everything the launcher needs of one: the command that
trains it, its config class, its nodes, how to build it for Launchpad, the
learner state its checkpoints restore into, the policy an evaluator or
`collect-demos` runs, and what a checkpoint must record to resume under a
config. `launch/mpo.py` and `launch/ail.py` each define one (`PROGRAM`);
`for_command` and `for_config` find it.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Optional

from tandem.launch import config as config_lib


@dataclasses.dataclass(frozen=True)
class Program:
  """One distributed program, as the launcher sees it."""
  # The `tandem` subcommand that trains it: 'train', 'train-ail'.
  command: str
  # Its frozen, validated run config (config.json holds one).
  config_class: type
  # (cfg, run_dir, *, resume, segment) -> launchpad.Program. segment: which
  # launch of the run this is (1 first).
  build: Callable[..., Any]
  # cfg -> a fresh learner state: what a checkpoint of the run restores into.
  learner_template: Callable[[Any], Any]
  # (cfg, learner state) -> the acting policy's parameters.
  policy_of: Callable[[Any, Any], Any]
  # (cfg, checkpoint metadata) -> why the checkpoint cannot resume under cfg
  # beyond its tree (learner_template checks that), or None.
  checkpoint_mismatch: Callable[[Any, dict], Optional[str]]
  # launch type -> per-group process settings (local_mp: a PythonProcess per
  # group; {} for local_mt, which has one process).
  local_resources: Callable[[str], dict]
  # num_actors -> the program's nodes, as their crash reports and stop
  # markers name them.
  node_names: Callable[[int], list]
  # (cfg, a resume's run directory or None) -> the record of the expert
  # demonstrations the run learns from, checked before launch; None for a
  # program that has none.
  check_demonstrations: Optional[Callable[[Any, Optional[str]], dict]] = None


# Each program's module, imported only when asked for: a program imports
# Launchpad, Reverb and TensorFlow, which --show_config and --help need not.
_MODULES = {'train': 'tandem.launch.mpo', 'train-ail': 'tandem.launch.ail'}
# The command of each config class; a subclass takes its nearest base's
# (AILTrainConfig extends TrainConfig).
_COMMANDS = {config_lib.TrainConfig: 'train',
             config_lib.AILTrainConfig: 'train-ail'}
COMMANDS = tuple(_MODULES)


def command_of(config_class: type) -> str:
  """The command that trains runs of `config_class` (or of the config class
  it extends: a named config may return a subclass)."""
  return next(_COMMANDS[c] for c in config_class.__mro__ if c in _COMMANDS)


def for_command(command: str) -> Program:
  """The program `tandem <command>` trains."""
  program = importlib.import_module(_MODULES[command]).PROGRAM
  assert program.command == command, (program.command, command)
  return program


def for_config(cfg) -> Program:
  """The program a config (or config class) belongs to."""
  return for_command(command_of(cfg if isinstance(cfg, type) else type(cfg)))
