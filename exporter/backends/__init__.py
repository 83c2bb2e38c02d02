"""Backends read fields for a device; the collector never sees NVML or the fake state directly."""
