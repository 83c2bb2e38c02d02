"""``gpu-exporter``: dcgm-exporter's flags and ``--config-file``, the wiring of the layers below, and ``doctor``."""
