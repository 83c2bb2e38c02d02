"""Authentication and authorisation the way a Kubernetes aggregated API server does them (spec §4)."""
