"""Hostile input on the stage link (issue 17, cases 1 and 2): the link header and tensor specs are bounded before
anything is allocated, and a real `vcascade stage-group` process counts what it refuses and keeps serving."""

from __future__ import annotations

import time

import msgspec
import pytest
import torch
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.center.test_stage_group import _start_group, _stop, _write_config
from tests.demo import scrape_metrics
from tests.hostile import deep_header, hostile_frames, maps_over, values
from vcascade.center.intake.microbatch import MicroBatch
from vcascade.center.stages.link import (
    LINK_VERSION,
    MAX_TENSOR_DIMS,
    MAX_TENSOR_ELEMENTS,
    RemoteStages,
    decode_message,
    encode_message,
)
from vcascade.center.stages.engine import StageEngine
from vcascade.core.protocol.bounded_decode import REASONS
from vcascade.core.config import load_config
from vcascade.core.transport.sockets import make_socket
from vcascade.core.protocol.wire import MalformedMessage

pytestmark = pytest.mark.filterwarnings("ignore:The given buffer is not writable")  # tensors are views on frames

ZERO_BY_2_63 = [[0, 2**63], "float32", 0, "c"]
"""The tensor spec that crashed a stage group natively: no elements, so every byte count agrees (0 == 0)."""


def _header(tensors: list, **fields) -> bytes:
    return msgspec.msgpack.encode({"kind": "batch", "seq": 1, "tensors": tensors, "compute_s": [], "v": LINK_VERSION,
                                   **fields})  # fmt: skip


def _reason(frames: list) -> str:
    with pytest.raises(MalformedMessage) as info:
        decode_message(frames)
    return info.value.reason


@pytest.mark.parametrize(
    ("spec", "frame"),
    [
        (ZERO_BY_2_63, b""),
        ([[2**63, 0], "uint8", 0, "c"], b""),
        ([[0, 2**31, 2**31, 2**31], "bool", 0, "c"], b""),  # strides would overflow int64
        ([[1] * (MAX_TENSOR_DIMS + 1), "uint8", 1, "c"], b"x"),
        ([[MAX_TENSOR_ELEMENTS + 1], "uint8", MAX_TENSOR_ELEMENTS + 1, "c"], b"x"),
        ([[2, 2], "complex64", 32, "c"], b"x" * 32),
        ([[-1, -2], "uint8", 2, "c"], b"xy"),
        ([[4], "float32", 16, "nhwc"], b"x" * 16),
    ],
)
def test_tensor_specs_outside_the_limits_are_refused_before_a_tensor_is_made(spec, frame):
    """Issue 17 case 2: ``torch.empty((0, 2**63))`` took the group's IO thread down."""
    assert _reason([_header([spec]), frame]) == "tensor"


def test_specs_at_the_limits_still_decode():
    shape = [0] + [4] * (MAX_TENSOR_DIMS - 1)
    _, tensors = decode_message([_header([[shape, "float32", 0, "c"]]), b""])
    assert tensors[0].shape == tuple(shape) and tensors[0].numel() == 0
    _, (ones,) = decode_message(encode_message("batch", 3, (torch.ones(2, 3),)))
    assert torch.equal(ones, torch.ones(2, 3))


def test_a_deep_link_header_is_too_deep():
    assert _reason([deep_header({"kind": "batch", "seq": 1, "v": LINK_VERSION})]) == "too_deep"


_spec = st.tuples(
    st.lists(st.integers(-(2**63), 2**64 - 1) | st.integers(0, 8), max_size=10),
    st.sampled_from(["float32", "uint8", "bool", "int64"]) | st.text(max_size=8),
    st.integers(-(2**63), 2**64 - 1) | st.integers(0, 64),
    st.sampled_from(["c", "nhwc"]) | values,
).map(list)
_link_maps = maps_over(["kind", "seq", "tensors", "compute_s", "error", "v"], {
    "kind": st.sampled_from(["batch", "result", "error"]) | st.text(max_size=5),
    "v": st.just(LINK_VERSION) | st.integers(-5, 5),
    "tensors": st.lists(_spec | values, max_size=3),
})  # fmt: skip


@settings(max_examples=400, deadline=None, database=None)
@given(hostile_frames(_link_maps), st.lists(st.binary(max_size=64), max_size=3))
def test_link_decode_gives_tensors_or_malformed_for_any_frames(header, tensor_frames):
    try:
        decoded, tensors = decode_message([header, *tensor_frames])
    except MalformedMessage as exc:
        assert exc.reason in (*REASONS, "frames", "tensor")
        return
    assert decoded.v == LINK_VERSION and len(tensors) == len(tensor_frames)
    for tensor, frame in zip(tensors, tensor_frames):
        assert tensor.numel() * tensor.element_size() == len(frame)


# ---------------------------------------------------------------- a real stage-group process


def _malformed(port: int) -> dict[str, float]:
    """``vcascade_stage_group_malformed_messages_total`` of group stages-b, by reason."""
    counts = {}
    for line in scrape_metrics(port).splitlines():
        if line.startswith('vcascade_stage_group_malformed_messages_total{group="stages-b"'):
            counts[line.split('reason="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
    return counts


def test_stage_group_survives_a_zero_by_2_63_tensor_spec_and_a_deep_header(demo_raw, free_port, tmp_path):
    """Issue 17 cases 1 and 2, against a live group: both messages are counted, the group keeps serving."""
    config = _write_config(demo_raw, free_port, tmp_path)
    dep = load_config(config)
    group = _start_group(config)
    try:
        endpoint, port = dep.stage_groups["stages-b"].endpoint(), dep.stage_groups["stages-b"].metrics_port
        dealer = make_socket(zmq.Context.instance(), zmq.DEALER)
        dealer.connect(endpoint)
        dealer.send_multipart([_header([ZERO_BY_2_63]), b""])
        dealer.send(deep_header({"kind": "batch", "seq": 2, "v": LINK_VERSION}))
        deadline = time.monotonic() + 60
        while _malformed(port) != {"tensor": 1.0, "too_deep": 1.0}:
            assert group.poll() is None, f"stage group exited with {group.returncode}"
            assert time.monotonic() < deadline, _malformed(port)
            time.sleep(0.2)
        dealer.close()

        answered: dict[int, object] = {}
        remote = RemoteStages(zmq.Context.instance(), endpoint, 1, 60.0)
        engine = StageEngine([remote], 1, lambda b: answered.__setitem__(b.seq, b),
                             lambda b, where, exc: answered.__setitem__(b.seq, exc))  # fmt: skip
        engine.start()
        engine.submit(MicroBatch(0, [], (torch.zeros(2, 24, 56, 56),), 0.0, 0.0))  # stage 1's input: features.3
        assert engine.stop(timeout_s=60)
        assert isinstance(answered[0], MicroBatch) and answered[0].data[0].shape[0] == 2
    finally:
        assert _stop(group) == 0
