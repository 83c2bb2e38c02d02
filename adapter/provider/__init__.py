"""From a parsed request to values: one engine, and the custom, external and resource metrics over it."""
