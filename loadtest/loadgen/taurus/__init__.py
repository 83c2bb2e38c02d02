"""Taurus YAML files run by the project's own closed-loop load generator (``gpu-loadtest run --taurus``).

Pure translation here (``merge``: a file's documents into one config, as bzt merges them; ``overrides``: ``-o``
paths; ``values``: think times (durations are ``clikit.durations``); ``keys``: the accepted and refused keys per
level; ``plan``: a file into a typed :class:`~.plan.TaurusPlan`; ``schedule``: when each virtual user
starts and the throughput cap over time; ``cache``: JMeter's HTTP cache for one user, as ``store-cache`` sets it up).
The I/O that runs a plan is ``loadgen.closed_loop``.
"""
