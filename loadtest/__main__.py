"""``python -m loadtest`` is ``gpu-loadtest``."""

from loadtest.cli import main

main()
