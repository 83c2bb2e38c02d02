"""Kubernetes ``metav1.Status`` errors: every failure on the API is one of these, never a stack trace."""

from __future__ import annotations

from typing import Any

_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 429: "TooManyRequests",
            500: "InternalError", 503: "ServiceUnavailable"}


class ApiError(Exception):
    def __init__(self, code: int, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def body(self) -> dict[str, Any]:
        status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": self.message, "reason": _REASONS.get(self.code, ""), "code": self.code}
        if self.details:
            status["details"] = self.details
        return status


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def not_found() -> ApiError:
    """A path nothing here serves: the apiserver's own words for it."""
    return ApiError(404, "the server could not find the requested resource")


def metric_not_found(metric: str, group_resource: str, name: str | None = None, selector: str = "") -> ApiError:
    """The reference server's wording, so operators' searches and runbooks keep working."""
    message = f"the server could not find the metric {metric} for {group_resource}"
    if name is not None:
        message += f" {name}"
        if selector:
            message += f" with selector {selector}"
    return ApiError(404, message)


def unavailable(message: str) -> ApiError:
    return ApiError(503, message)


def internal(message: str) -> ApiError:
    return ApiError(500, f"Internal error occurred: {message}", {"causes": [{"message": message}]})
