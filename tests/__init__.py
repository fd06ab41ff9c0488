"""Tandem's tests; they mirror the modules they test."""

import os

# The repository's root, for tests that start processes there or read files
# beside the code.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
