"""Benchmarks: each measures against a baseline run in the same invocation and reports ratios."""
