"""Taurus YAML files run by the project's own closed-loop load generator (``gpu-loadtest run --taurus``).

Pure translation here (``values``: durations and think times; ``overrides``: ``-o`` paths; ``keys``: the accepted and
refused keys per level; ``plan``: a file into a typed :class:`~.plan.TaurusPlan`; ``schedule``: when
each virtual user starts and the throughput cap over time). The I/O that runs a plan is ``loadgen.closed_loop``.
"""
