"""KEDA's external scaler (``externalscaler.ExternalScaler``, gRPC) over the adapter's metrics.

``metadata`` reads a trigger's ``scalerMetadata``; ``wire`` translates it into the provider request the HTTP APIs
use and the answer into KEDA's messages (both pure); ``servicer`` is the gRPC service over the providers;
``server`` runs it inside ``gpu-adapter serve`` (``--keda-scaler-port``). docs/keda.md is the user's guide.
"""
