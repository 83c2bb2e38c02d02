"""DCGM-compatible GPU metrics exporter built on NVML."""
