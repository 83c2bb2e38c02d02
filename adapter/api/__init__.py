"""The Kubernetes-facing layer: parse requests, call the provider, write Kubernetes JSON or Status."""
