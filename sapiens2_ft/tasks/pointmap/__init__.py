"""Pointmaps: the task module, the pointmap loss set, metric-space point metrics."""
