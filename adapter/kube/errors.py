"""What can go wrong talking to the Kubernetes API, as the adapter's kube layer reports it."""

from __future__ import annotations

from typing import Any


class KubeConfigError(Exception):
    """Kubernetes credentials that were asked for but cannot be used; the message is one line naming the source."""


class KubeError(Exception):
    pass


class KubeApiError(KubeError):
    """A non-2xx answer (or a watch ``ERROR`` event), with the ``Status`` fields when the body carried one."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message

    @classmethod
    def from_status(cls, code: int, body: Any, fallback: str) -> KubeApiError:
        if isinstance(body, dict) and body.get("kind") == "Status":
            return cls(int(body.get("code") or code), str(body.get("reason") or ""),
                       str(body.get("message") or fallback))
        return cls(code, "", fallback)


class KubeTransportError(KubeError):
    """No usable answer: refused, reset, timed out, truncated."""


class KubeCredentialError(KubeError):
    """No credentials to send: the exec plugin failed or is still running, a token or certificate file is
    unreadable. One line naming where the credentials come from."""


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__
