"""The rules the adapter serves: a rules file read with the built-in rule sets it includes (or the GPU presets
alone, without ``--config``), and hot reload of that file."""
