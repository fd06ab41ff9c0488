"""The sizes that tie a task to its learner."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Dims:
  """Sizes of a task's flat observation and action vectors: what networks,
  replay rows and demonstrations are built for."""
  observation: int
  action: int
