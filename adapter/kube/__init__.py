"""Kubernetes access: credentials, the API over the official client, watch-backed object caches, selectors."""
