"""What every HTTP listener of the project (the adapter's HTTPS port, the exporter's /metrics) gives a client before
it has been authenticated, and how it takes it back.

Each port is reachable from any pod (or from the node's network) before TLS, headers and authentication are done,
so each is bounded as kube-apiserver bounds its own (k8s.io/apiserver ``pkg/server/secure_serving.go``: a 32 s
read-header timeout, a 90 s idle timeout, a 1 MiB header limit): the TLS handshake and each request's head within
a timeout, at most so many bytes and fields of head, no body where none is taken, and a cap on the connections
that hold memory without a request in progress (:mod:`listener.waiting`).

- :mod:`listener.limits`: the settings, with their defaults' sources.
- :mod:`listener.head`: measures a request head as its bytes arrive (pure).
- :mod:`listener.waiting`: the connections without a request in progress, oldest closed first past a budget.
- :mod:`listener.protocol`: uvicorn's HTTP protocol with the above applied, TLS started per connection.
- :mod:`listener.serving`: a uvicorn configuration over that protocol.
"""
