"""Measurement: the per-second timeline of a run, the figures it is judged by (summary, time to capacity), its
plot, range data from Prometheus, and the live progress view."""
