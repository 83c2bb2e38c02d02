"""``python -m loadtest`` is ``gpu-loadtest``."""

from loadtest.cli.main import main

main()
