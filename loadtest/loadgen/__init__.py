"""Load generation, the bottom layer of the load test: rate profiles, the open-loop generator, and the closed loop
of virtual users that runs a Taurus file (``taurus/`` reads the file into a plan)."""
