"""Thread counts from the cores a process is given (vcascade.core.runtime.threads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vcascade.core.runtime.threads import DetectorThreads, available_cpus, cgroup_cpu_quota, detector_threads, threads_per_stage


def test_cgroup_v2_quota_caps_the_affinity_mask(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.5
    assert available_cpus(tmp_path) == min(len(os.sched_getaffinity(0)), 2)  # 1.5 cores round up to 2


def test_unlimited_or_missing_quota_leaves_the_affinity_mask(tmp_path):
    assert cgroup_cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None
    assert available_cpus(tmp_path) == len(os.sched_getaffinity(0))


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.0 and available_cpus(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(tmp_path) is None


def test_detector_defaults_one_run_per_core_and_fill_in_the_unset_count():
    assert detector_threads(4, None, None) == DetectorThreads(instances=4, intra_op_threads=1)
    assert detector_threads(4, None, 2) == DetectorThreads(instances=2, intra_op_threads=2)
    assert detector_threads(4, 1, None) == DetectorThreads(instances=1, intra_op_threads=4)
    assert detector_threads(1, 3, None) == DetectorThreads(instances=3, intra_op_threads=1)


def test_stage_threads_split_the_cores_and_keep_a_configured_value():
    assert threads_per_stage(8, 2, None) == 4
    assert threads_per_stage(2, 3, None) == 1
    assert threads_per_stage(8, 2, 3) == 3


@pytest.mark.skipif(available_cpus() < 2, reason="numpy's BLAS has one thread on one core anyway")
def test_process_threads_set_torch_opencv_and_numpys_blas_apart():
    """In a fresh process (the settings are process-wide): torch keeps its count, numpy's BLAS gets one."""
    code = """
import json, cv2, numpy, torch
from threadpoolctl import threadpool_info
from vcascade.core.runtime.threads import set_process_threads
set_process_threads(2, 1)
blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas" and "numpy" in p["filepath"]]
print(json.dumps({"torch": torch.get_num_threads(), "cv2": cv2.getNumThreads(), "numpy_blas": blas}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.splitlines()[-1]) == {"torch": 2, "cv2": 1, "numpy_blas": [1]}
