"""Tests of the study scripts under studies/."""
