"""Authentication and authorisation the way a Kubernetes aggregated API server does them
(k8s.io/apiserver's delegating authenticator and authorizer)."""
