"""Serving: the sampling thread that renders one text snapshot per collection, its hang watch and counters reload,
and the HTTP server (with its web configuration) that serves the latest snapshot."""
