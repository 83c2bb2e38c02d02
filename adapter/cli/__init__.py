"""``gpu-adapter``: the command line."""
