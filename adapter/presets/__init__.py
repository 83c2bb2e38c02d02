"""The built-in rule sets, written in prometheus-adapter's rules format: the GPU presets (served without
``--config``), the inference-server presets, the inference-gateway presets and the capacity-headroom preset. A rules
file pulls them in by name with ``include``."""
