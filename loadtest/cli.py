"""Console entry point; the commands land with their issue (see README)."""

import sys


def main() -> None:
    print("gpu-loadtest: not implemented yet in this version (see README, 'What this is')", file=sys.stderr)
    sys.exit(2)
