"""What the exporter and ``gpu-exporter doctor`` both need to start: a one-line startup error and the backend by
name (``nvml``: a missing NVML is an error, never a silent switch to ``fake``)."""

from __future__ import annotations

import logging

from exporter.backends.base import Backend, BackendUnavailable

log = logging.getLogger("exporter")


class StartupError(Exception):
    """A one-line reason the exporter cannot start."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def open_backend(name: str, fake_gpu_count: int, fake_state: str | None, fake_seed: str,
                 interval_s: float = 1.0, *, accept_fake_gpus: bool = False) -> Backend:
    if name == "fake":
        from exporter.backends.fake import FakeBackend, FakeStateError

        fake = FakeBackend(fake_gpu_count, fake_state, seed=fake_seed)
        try:
            fake.open()
        except FakeStateError as exc:
            raise StartupError(str(exc)) from None
        return fake
    from exporter.backends.nvml import NvmlBackend, NvmlMissing

    nvml = NvmlBackend(gpm_min_gap_s=interval_s, accept_fake_gpus=accept_fake_gpus)
    try:
        nvml.open()
    except NvmlMissing as exc:
        raise StartupError(str(exc), code=1) from None
    except BackendUnavailable as exc:
        log.error("%s; serving /health 503 and retrying every collection", exc)
    return nvml
