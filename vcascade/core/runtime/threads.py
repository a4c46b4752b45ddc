"""How many threads each process uses, from the cores it is given (``cpus`` in its config).

Every process of a deployment sets its thread pools explicitly: ONNX Runtime's and torch's defaults take every
core of the host, so a few processes sharing one host would each start as many threads as there are cores
and fight over them (oversubscription: context switches and cache thrashing instead of work). The rules:

* **cores given** (``cpus``): the process's config value, or else what it may really use: the CPUs of its
  scheduler affinity mask (``taskset``, ``docker --cpuset-cpus``), capped by its cgroup CPU quota rounded up
  (``docker --cpus``, a Kubernetes CPU limit; cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``).
* **edge**: ``detector.instances`` concurrent detector runs (default: one per core given), each with
  ``detector.intra_op_threads`` ONNX Runtime threads (default: the cores given / instances, at least 1).
  Concurrent runs of one session on different frames scale almost linearly; intra-op threads inside one small
  convolution do not (YOLOX-nano on 2 threads is about 1.5x one thread). Tracking stays in frame order.
* **worker / stage group**: one thread per pipeline stage, each with ``torch_threads`` torch threads (ONNX
  stages: ``intra_op_threads``), default: the cores given / the process's stages, at least 1.
* **OpenCV**: 1 thread by default (``opencv_threads``): each caller of OpenCV (camera readers, detector runs,
  the batcher) is already its own thread, so OpenCV's own pool would only oversubscribe.
* **numpy's BLAS** (OpenBLAS in the numpy wheels, set through ``threadpoolctl``, which also caps any other BLAS
  loaded by then, such as OpenCV's): 1 thread. Its one hot use is
  the embedding head's gallery product, a few ROIs against the identities enrolled; OpenBLAS's default of
  one thread per core spun the second one and doubled its CPU for the same wall time (2.1 against 1.4 ms
  of CPU per ROI on a 10,000-slot gallery, measured on this project's 2-core machine).
* **spinning**: off by default (``allow_spinning``): ONNX Runtime's idle threads otherwise busy-wait and burn
  the cores the other processes of the host need.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def available_cpus(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The cores this process may use: its affinity mask's CPU count, capped by its cgroup CPU quota (rounded up).

    Returns:
        At least 1.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


def cgroup_cpu_quota(cgroup_root: Path = CGROUP_ROOT) -> float | None:
    """The cgroup CPU quota in cores (quota / period), or None when unlimited or unreadable.

    Reads cgroup v2 ``cpu.max`` ("max 100000" or "200000 100000"), else v1 ``cpu/cpu.cfs_quota_us`` and
    ``cpu/cpu.cfs_period_us`` (quota -1: unlimited).
    """
    try:
        quota, period = (cgroup_root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((cgroup_root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((cgroup_root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def cores_given(cpus: int | None) -> int:
    """``cpus`` from a process's config, or :func:`available_cpus` when it is None."""
    return cpus if cpus is not None else available_cpus()


@dataclass(frozen=True)
class DetectorThreads:
    """The edge's detector threads: ``instances`` concurrent runs of ``intra_op_threads`` ONNX Runtime threads."""

    instances: int
    intra_op_threads: int


def detector_threads(cpus: int, instances: int | None, intra_op_threads: int | None) -> DetectorThreads:
    """Fill in the unset detector thread counts for an edge given ``cpus`` cores (module docstring).

    Args:
        cpus: cores given to the edge (>= 1).
        instances: concurrent detector runs, or None: ``cpus // intra_op_threads`` (so ``cpus`` when both unset).
        intra_op_threads: ONNX Runtime threads per run, or None: ``cpus // instances``.

    Returns:
        Both counts, each at least 1.
    """
    if instances is None:
        instances = max(1, cpus // (intra_op_threads or 1))
    if intra_op_threads is None:
        intra_op_threads = max(1, cpus // instances)
    return DetectorThreads(instances, intra_op_threads)


def threads_per_stage(cpus: int, stages: int, configured: int | None) -> int:
    """torch (or ONNX Runtime intra-op) threads of each of a process's ``stages`` stage threads: ``configured``,
    or ``cpus // stages`` (at least 1) when it is None."""
    return configured if configured is not None else max(1, cpus // max(1, stages))


def stage_threads_of(cfg) -> int:
    """Threads of each stage of a worker or stage group config (``cpus``, ``devices``: one per stage,
    ``torch_threads``): :func:`threads_per_stage` over the cores it is given."""
    return threads_per_stage(cores_given(cfg.cpus), len(cfg.devices), cfg.torch_threads)


def set_process_threads(torch_threads: int | None, opencv_threads: int) -> None:
    """Set this process's torch intra-op threads (None: leave torch alone), one torch inter-op thread,
    ``cv2.setNumThreads(opencv_threads)`` (0: OpenCV's default) and one thread for numpy's BLAS."""
    import cv2
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")  # every BLAS loaded: numpy's, OpenCV's; torch sets its own below

    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # only allowed once per process, before any inter-op work
            pass
    cv2.setNumThreads(opencv_threads)
