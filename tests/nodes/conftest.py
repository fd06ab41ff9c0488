"""Fixtures of the node tests."""

from tests.replay.conftest import checkpoint  # noqa: F401  (a fixture, used by name)
