"""``gpu-loadtest``'s command line (``loadtest.cli.main``)."""
