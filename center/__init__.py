"""Center worker: micro-batching, pipeline stages on devices, recognition heads (see DESIGN.md)."""

from center.batcher import STOP, MicroBatcher, Prepared, preprocess_items, split_stale
from center.heads import ClassifierHead, EmbeddingHead, HeadContext, Match, TextHead, build_head, l2_normalise
from center.metrics import WorkerTelemetry
from center.microbatch import MicroBatch, RoiItem
from center.outbox import Outbox
from center.preprocess import DecodeError, PreprocessSpec, decode_jpeg, stack_batch, to_device, to_input
from center.recognizer import TorchStage, build_model, load_stages, run_chained, split_model
from center.stages import StageEngine
from center.balance import Plan, balance
from center.onnx_stages import OnnxStage, build_onnx_stages, cut_points, split_onnx
from center.profile import ModelProfile, profile_onnx, profile_torch
from center.runtimes import RUNTIMES, load_recognizer_stages
from center.worker import run_worker

__all__ = [
    "STOP", "DecodeError", "EmbeddingHead", "Match", "MicroBatch", "MicroBatcher", "Outbox", "Prepared",
    "PreprocessSpec", "RoiItem", "StageEngine", "TorchStage", "WorkerTelemetry", "build_model", "decode_jpeg",
    "l2_normalise", "load_stages", "preprocess_items", "run_chained", "run_worker", "split_model", "split_stale",
    "stack_batch", "to_device", "to_input",
    "ClassifierHead", "HeadContext", "TextHead", "build_head",
    "ModelProfile", "OnnxStage", "Plan", "RUNTIMES", "balance", "build_onnx_stages", "cut_points",
    "load_recognizer_stages", "profile_onnx", "profile_torch", "split_onnx",
]
