"""The HTTPS server: the app and its routes, TLS serving, request logging and the adapter's own metrics."""
