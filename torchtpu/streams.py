"""``torch.tpu`` streams and events, shaped like ``torch.cuda``'s.

``torch.tpu.Stream`` and ``torch.tpu.Event`` are PyTorch's generic ``torch.Stream``
and ``torch.Event`` on the tpu device; the device guard (csrc/guard.cpp) backs them
with the C runtime's streams (runtime/include/torchtpu/stream.h). A stream is an
ordering domain: work is tagged with the stream current on the submitting thread,
``query``/``synchronize`` and events cover exactly the work put on that stream, and
timing events measure when that work finished on the device. PJRT already orders
ops by their data, so work on two streams may overlap only where neither reads the
other's results; a stream made to wait for another (``wait_stream``,
``wait_event``) waits on the host (docs/streams.md).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]


def _tpu_device(device: Any) -> torch.device:
    from .device_module import _index

    return torch.device("tpu", _index(device))


class Stream(torch.Stream):
    """A tpu stream: ``torch.tpu.Stream(device=None, priority=0)``.

    Priorities are accepted for compatibility; PJRT exposes none, so all streams
    run alike."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs:  # (stream_id, device_index, device_type): wraps an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_tpu_device(device), priority=priority)

    def wait_event(self, event: "Event | torch.Event") -> None:
        """Work later put on this stream starts after ``event`` (a host wait)."""
        _unwrap(event).wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Work later put on this stream starts after the work already on ``stream``."""
        self.wait_event(stream.record_event())

    def record_event(self, event: "Event | torch.Event | None" = None) -> "Event | torch.Event":
        if event is None:
            event = Event()
        _unwrap(event).record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, torch.Stream) and super().__eq__(other)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index, self.device_type))

    def __repr__(self) -> str:
        return f"<torch.tpu.Stream device=tpu:{self.device_index} stream_id={self.stream_id}>"


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


class Event:
    """A tpu event: ``torch.tpu.Event(enable_timing=False, blocking=False, interprocess=False)``.

    Holds a ``torch.Event`` on the tpu device (``.event``), as ``torch.cuda.Event`` holds a
    CUDA event. ``blocking`` needs no flag (``synchronize`` always blocks the host);
    ``interprocess`` events are not supported by PJRT and raise."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        if interprocess:
            raise NotImplementedError("tpu: interprocess events are not supported by PJRT")
        self.event = torch.Event("tpu", enable_timing=enable_timing, blocking=blocking)

    def record(self, stream: torch.Stream | None = None) -> None:
        self.event.record(current_stream() if stream is None else stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        self.event.wait(current_stream() if stream is None else stream)

    def query(self) -> bool:
        return self.event.query()

    def synchronize(self) -> None:
        self.event.synchronize()

    def elapsed_time(self, end_event: "Event | torch.Event") -> float:
        """Milliseconds of device work between this event and ``end_event``."""
        return self.event.elapsed_time(_unwrap(end_event))

    @property
    def device(self) -> torch.device:
        return self.event.device

    @property
    def event_id(self) -> int:
        return self.event.event_id

    def __repr__(self) -> str:
        return f"<torch.tpu.Event event_id={self.event_id}>"


def _unwrap(event: "Event | torch.Event") -> torch.Event:
    return event.event if isinstance(event, Event) else event


def current_stream(device: Any = None) -> Stream:
    """The calling thread's current stream on ``device`` (the current device by default)."""
    return _wrap(torch.accelerator.current_stream(_tpu_device(device)))


def default_stream(device: Any = None) -> Stream:
    cur = torch.accelerator.current_stream(_tpu_device(device))
    return Stream(stream_id=0, device_index=cur.device_index, device_type=cur.device_type)


def set_stream(stream: torch.Stream | None) -> None:
    """Makes ``stream`` current on its device for the calling thread (None: no-op, as CUDA)."""
    if stream is None:
        return
    if stream.device.type != "tpu":
        raise ValueError(f"expected a tpu stream, got {stream}")
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Selects a stream (and its device) for the ``with`` block, like ``torch.cuda.StreamContext``."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self._prev_stream: torch.Stream | None = None
        self._prev_dst: torch.Stream | None = None
        self._device: Any = None

    def __enter__(self):
        if self.stream is None:
            return self
        from .device_module import device as _device_ctx

        self._prev_stream = current_stream()
        self._device = _device_ctx(self.stream.device_index)
        self._device.__enter__()
        # The destination device's own current stream is restored too.
        self._prev_dst = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        set_stream(self._prev_dst)
        self._device.__exit__(*exc)
        set_stream(self._prev_stream)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    """``with torch.tpu.stream(s):`` runs the block's ops on ``s``."""
    return StreamContext(stream)
