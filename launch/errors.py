"""How the command line ends: its exit codes, and the error for bad input
found before launch."""

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(ValueError):
  """Bad input found before launch: reported by name, exit 2."""
