"""Choosing a camera's video decoder: software, or a hardware one through PyAV's ``hwaccel`` with a fallback.

``decoder`` (camera setting): ``software`` (FFmpeg's CPU decoders), ``cuda`` (NVIDIA NVDEC), ``qsv`` (Intel Quick
Sync) or ``auto`` (``cuda``, then ``qsv``): hardware acceleration of FFmpeg's own decoders (``AVHWAccel``), which
needs the device and its driver at run time. In the PyAV 18 wheel the native H.264, HEVC, AV1, VP9 and MJPEG
decoders offer only ``cuda`` (``av.codec.Codec(name, "r").hardware_configs``), so ``qsv`` falls back as
``unsupported_stream`` there; FFmpeg's separate QSV decoders (``h264_qsv``) are not used. A hardware decoder that cannot be used when the source opens (no such device, no permission,
this FFmpeg lacks it, the stream's codec or profile is not one it decodes) is skipped for the next candidate, and
at the end the source opens in software: the camera works, and each skip is counted with its reason
(:data:`FALLBACK_REASONS`). Frames from a hardware decoder are downloaded to system memory (PyAV's default), so
everything after decoding is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import av
from av.codec.hwaccel import HWAccel, hwdevices_available

DECODERS = ("auto", "software", "cuda", "qsv")
"""Values of the camera setting ``decoder``."""
CANDIDATES = {"auto": ("cuda", "qsv"), "cuda": ("cuda",), "qsv": ("qsv",), "software": ()}
"""Hardware device types tried, in order, for each ``decoder`` setting."""
FALLBACK_REASONS = (
    "not_in_ffmpeg",  # the loaded FFmpeg has no such device type (hwdevices_available)
    "no_device",  # creating the device failed: no GPU, no driver, no permission
    "unsupported_stream",  # the device has no decoder for this stream's codec or profile
    "open_error",  # another error opening with the hardware decoder (the log line has FFmpeg's message)
)
"""Why a hardware decoder was not used (label ``reason`` of ``vcascade_edge_decoder_fallbacks_total``)."""

Fallback = Callable[[str, str, str], None]
"""``fallback(device_type, reason, message)``: a hardware decoder was skipped (reason of FALLBACK_REASONS)."""


def open_decoding(target: str, kwargs: dict[str, Any], decoder: str, fallback: Fallback
                  ) -> tuple[av.container.InputContainer, str]:
    """Open ``target`` with ``av.open(target, **kwargs)``, decoding on the first usable device of ``decoder``.

    Returns:
        (container, decoder in use): ``cuda``, ``qsv`` or ``software``.

    Raises:
        av.error.FFmpegError, OSError: the source failed to open (in software, or already with a hardware decoder:
            an error naming the source is the source's, and is not retried); the caller classifies it.
        ValueError: ``decoder`` is not one of :data:`DECODERS`.
    """
    if decoder not in CANDIDATES:
        raise ValueError(f"unknown decoder {decoder!r}; expected one of {DECODERS}")
    available = set(hwdevices_available()) if CANDIDATES[decoder] else set()
    for device in CANDIDATES[decoder]:
        if device not in available:
            fallback(device, "not_in_ffmpeg", f"this FFmpeg has no {device} device type")
            continue
        try:
            return av.open(target, **kwargs, hwaccel=HWAccel(device, allow_software_fallback=False)), device
        except RuntimeError as exc:  # PyAV: "Hardware accelerated decode requested but no stream is compatible"
            fallback(device, "unsupported_stream" if "compatible" in str(exc) else "open_error", str(exc))
        except (av.error.FFmpegError, OSError) as exc:
            if getattr(exc, "filename", None):  # the source itself failed to open (PyAV names it): not the device's
                raise
            fallback(device, "no_device", str(exc))  # av_hwdevice_ctx_create failed (errors name no file)
    return av.open(target, **kwargs), "software"
