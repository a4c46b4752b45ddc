"""Concurrent detector runs on different frames, handed back in the order the frames were taken.

Detection is most of an edge's work (YOLOX-nano: about 27 ms of CPU per frame against under 1 ms for decoding
and tracking), and one small model gains little from ONNX Runtime's intra-op threads. So the edge runs
``instances`` detector threads (:func:`vcascade.core.runtime.threads.detector_threads`: one per core given) that each
take frames from the :class:`~edge.capture.frames.FrameSlots` and run the one shared session on them at once; ONNX
Runtime releases the GIL during a run.

Order: a thread takes its frames and draws a ticket under one lock, so tickets follow the slots' round-robin
order (a file camera's frame is decoded by the thread that claimed it, after the lock: :mod:`vcascade.edge.capture.pull`); :meth:`DetectorPool.next` hands the detections back strictly by ticket. The edge's loop tracks them
there, on one thread, so every camera's tracker still sees its frames in order. Taken frames stay ``held``
in the slots until the loop has tracked them (:meth:`FrameSlots.release`), so a camera being removed is
only forgotten after its last frame.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from vcascade.core.detections import Detections
from vcascade.edge.detection import Detector
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.detection.motion import MotionGates

log = logging.getLogger(__name__)

TAKE_TIMEOUT_S = 0.1
"""How long a detector thread waits for frames before checking whether it should stop, s."""


@dataclass(frozen=True)
class DetectedFrame:
    """One frame after detection.

    Attributes:
        frame: the frame.
        detections: its detections (boxes in frame pixels), or None when the detector rejected the frame.
        error: why it was rejected (the detector's ``ValueError``: unsupported shape or dtype), else "".
        start_s, end_s: ``time.perf_counter()`` seconds around the detector run (the latency account).
        still: the motion gate found no motion (:mod:`vcascade.edge.detection.motion`): the frame was not detected,
            ``detections`` is None and the edge carries its camera's last detections over it.
    """

    frame: Frame
    detections: Detections | None
    error: str
    start_s: float
    end_s: float
    still: bool = False


def detect_frames(detector: Detector, frames: list[Frame], wanted: list[bool] | None = None) -> list[DetectedFrame]:
    """Detect on frames of different cameras in one batched detector call.

    A frame the detector rejects (``ValueError``) is returned with its ``error``; the other frames of the batch
    are then detected one by one. ``wanted`` (one flag per frame; None: all) marks the frames the motion gate
    sends to the detector; the others come back ``still``, in their place.

    Raises:
        Whatever the detector raises other than ``ValueError`` (a broken session: the edge stops).
    """
    if wanted is not None and not all(wanted):
        now_s = time.perf_counter()
        detected = iter(detect_frames(detector, [f for f, w in zip(frames, wanted) if w]) if any(wanted) else [])
        return [next(detected) if w else DetectedFrame(f, None, "", now_s, now_s, still=True)
                for f, w in zip(frames, wanted)]
    start_s = time.perf_counter()
    try:
        batch = detector.detect_batch([frame.image for frame in frames])
    except ValueError:
        return [_detect_one(detector, frame) for frame in frames]
    end_s = time.perf_counter()
    return [DetectedFrame(frame, detections, "", start_s, end_s) for frame, detections in zip(frames, batch)]


def _detect_one(detector: Detector, frame: Frame) -> DetectedFrame:
    start_s = time.perf_counter()
    try:
        detections = detector(frame.image)
    except ValueError as exc:
        return DetectedFrame(frame, None, str(exc), start_s, time.perf_counter())
    return DetectedFrame(frame, detections, "", start_s, time.perf_counter())


class DetectorPool:
    """``instances`` threads running ``detector`` on frames from ``slots``; results come back in take order.

    Args:
        slots: the edge's frame slots (frames are taken with ``hold=True``; the caller releases them).
        detector: the detector; its ``detect_batch`` must be safe to call from several threads at once (true of
            :class:`~edge.detection.base.OnnxDetector`: one ONNX Runtime session, no per-run state).
        instances: detector threads (>= 1).
        frames_per_run: frames one run takes at most (at most one per camera; the detector's batch).
        name: used in thread names.
        gates: the cameras' motion gates (None: every frame is detected); asked in take order, under the take lock.
    """

    def __init__(
        self, slots: FrameSlots, detector: Detector, instances: int, frames_per_run: int, name: str = "edge",
        gates: MotionGates | None = None,
    ) -> None:
        if instances < 1:
            raise ValueError(f"instances must be >= 1, got {instances}")
        self.slots, self.detector, self.frames_per_run, self.gates = slots, detector, frames_per_run, gates
        self._stop = threading.Event()
        self._take_lock = threading.Lock()
        self._cond = threading.Condition()
        self._done: dict[int, list[DetectedFrame] | BaseException] = {}
        self._next_ticket = 0
        self._next_out = 0
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-detect-{i}", daemon=True) for i in range(instances)
        ]

    def start(self) -> None:
        """Start the detector threads."""
        for thread in self._threads:
            thread.start()

    def next(self, timeout_s: float) -> list[DetectedFrame] | None:
        """The next run's frames in take order, or None if it is not done within ``timeout_s``.

        Raises:
            The exception a detector thread hit (other than a rejected frame), for the run it hit it in.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._next_out not in self._done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            result = self._done.pop(self._next_out)
            self._next_out += 1
        if isinstance(result, BaseException):
            raise result
        return result

    def stop(self) -> None:
        """Stop the threads after their current run and wait for them (frames not yet handed back are lost:
        call at shutdown only)."""
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._take_lock:
                taken = self.slots.take_batch(self.frames_per_run, timeout_s=TAKE_TIMEOUT_S, hold=True)
                if not taken:
                    continue
                ticket = self._next_ticket
                self._next_ticket += 1
                wanted = [self._wanted(frame) for frame in taken.frames]
            try:  # a claimed camera's frame is decoded here, outside the take lock: other threads take meanwhile
                frames = taken.pull(lambda frame: wanted.append(self._wanted(frame)))
                result: list[DetectedFrame] | BaseException = detect_frames(
                    self.detector, frames, None if self.gates is None else wanted) if frames else []
            except BaseException as exc:  # noqa: BLE001 - handed to the edge's loop, which stops the edge
                log.exception("detector run failed")
                result = exc
            with self._cond:
                self._done[ticket] = result
                self._cond.notify_all()

    def _wanted(self, frame: Frame) -> bool:
        """Whether ``frame`` goes to the detector (its camera's motion gate; True without gates). Asked in each
        camera's frame order: under the take lock for a frame taken ready, under its claim for a pulled one."""
        return self.gates is None or self.gates.needs_detection(frame.camera, frame.image, frame.stream_ts_ms)
