"""Everything that asks Prometheus: the client, its credentials, the query cache and series discovery."""
