"""Reproducible speed comparisons: every figure is a ratio against a named baseline measured in the same run."""
