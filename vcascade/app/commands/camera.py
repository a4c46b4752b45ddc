"""``vcascade camera add|remove|list``: change the cameras of a running edge over its control socket
(:mod:`vcascade.app.control_client`).

    vcascade camera add    --config FILE --edge EDGE --name CAM --url URL [--set KEY=VALUE ...] [--wait-s S]
    vcascade camera remove --config FILE --edge EDGE --name CAM [--wait-s S]
    vcascade camera list   --config FILE --edge EDGE

With CurveZMQ on, this command connects with the keypair ``--key NAME`` (default: the edge's own, so it works on
the edge's host). ``--set`` takes any camera setting of the file (docs/CONFIG.md, ``cameras.<name>``), its value
read as YAML (``--set realtime=true --set detect_fps=5``). ``add`` waits until the camera's first real state:
``streaming`` (or ``ended``, a short file already read) is success; ``failed`` (a file), ``backing_off`` (a live
source that could not be opened) or ``stalled`` exit 1 with the reason. ``remove`` waits until the camera's books
are closed (every ROI it sent has a result or a drop) and prints them.

Prints JSON; exit codes: 0 done, 1 refused, unreachable, an added camera that failed or did not
start in time, a removed one whose books did not close in time, 2 invalid configuration/usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from vcascade.app.commands import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from vcascade.app.control_client import (
    FAULT_STATES,
    ControlUnreachable,
    first_state,
    request,
    wait_closed,
    wait_started,
)
from vcascade.core.config import load_config
from vcascade.core.protocol.control import CameraAdd, CameraList, CameraRemove, Reply
from vcascade.core.transport.security import SecurityError

ADD_WAIT_S = 30.0
"""Default of ``camera add --wait-s``: longer than a camera's default ``open_timeout_s`` (docs/CONFIG.md), so a
live source that hangs in its open is reported as such, not as "still connecting", s."""


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The ``add``, ``remove`` and ``list`` subcommands."""
    ops = parser.add_subparsers(dest="camera_command", required=True)
    add = _op_parser(ops, "add", "start reading a new camera on the edge")
    add.add_argument("--url", required=True, help="video file, rtsp(s)://, http(s)://, device://N, package://")
    add.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another camera setting")
    add.add_argument("--wait-s", type=float, default=ADD_WAIT_S,
                     help=f"wait this long for the camera's first state (streaming, or failed with the reason); "
                          f"0: no wait (default {ADD_WAIT_S:.0f})")  # fmt: skip
    remove = _op_parser(ops, "remove", "stop a camera; waits until its books are closed")
    remove.add_argument("--wait-s", type=float, default=120.0, help="wait this long for the books to close (0: no wait)")
    _op_parser(ops, "list", "the edge's cameras with their state and books", name=False)


def _op_parser(ops: argparse._SubParsersAction, op: str, help_text: str, name: bool = True) -> argparse.ArgumentParser:
    parser = ops.add_parser(op, help=help_text)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--edge", required=True, help="name of the edge (key under `edges`)")
    if name:
        parser.add_argument("--name", required=True, help="camera name")
    parser.add_argument("--key", help="CurveZMQ keypair NAME in keys_dir to connect with (default: the edge's)")
    parser.add_argument("--timeout-s", type=float, default=15.0, help="wait this long for each reply")
    parser.set_defaults(op=op)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Send the request (and for ``remove``, wait for the books); print the reply as JSON."""
    dep = load_config(args.config)
    if args.edge not in dep.edges or dep.edges[args.edge].control_port is None:
        where = "no edge of that name" if args.edge not in dep.edges else "edges.%s.control_port is not set" % args.edge
        print(f"vcascade camera: {args.config}: {where}", file=sys.stderr)
        return EXIT_CONFIG
    if args.op == "add":
        try:
            settings = dict(_setting(item) for item in args.set)
        except ValueError as exc:
            print(f"vcascade camera add: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        message: Any = CameraAdd(name=args.name, camera={**settings, "url": args.url})
    else:
        message = CameraRemove(name=args.name) if args.op == "remove" else CameraList()
    try:
        reply = request(dep, args.edge, message, args.key, args.timeout_s)
        if reply.ok and args.op == "remove" and args.wait_s > 0:
            reply = wait_closed(dep, args.edge, args.name, reply, args.key, args.timeout_s, args.wait_s)
        elif reply.ok and args.op == "add" and args.wait_s > 0:
            reply = wait_started(dep, args.edge, args.name, reply, args.key, args.timeout_s, args.wait_s)
    except (ControlUnreachable, SecurityError) as exc:
        print(f"vcascade camera {args.op}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return _print_reply(args, reply)


def _setting(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ValueError(f"--set {item!r}: expected KEY=VALUE")
    return key, yaml.safe_load(value)


def _print_reply(args: argparse.Namespace, reply: Reply) -> int:
    if not reply.ok:
        print(f"vcascade camera {args.op}: {reply.error}", file=sys.stderr)
        return EXIT_FAILURE
    if args.op == "list":
        print(json.dumps(reply.cameras, indent=2))
        return EXIT_OK
    camera = reply.cameras.get(args.name, {})
    print(json.dumps({args.name: camera}, indent=2))
    if args.op == "remove" and args.wait_s > 0 and camera.get("removal") != "closed":
        print(f"vcascade camera remove: {args.name}: books not closed after {args.wait_s:.0f} s", file=sys.stderr)
        return EXIT_FAILURE
    if args.op == "add" and args.wait_s > 0:
        return _started(args, reply, camera)
    return EXIT_OK


def _started(args: argparse.Namespace, reply: Reply, camera: dict[str, Any]) -> int:
    """EXIT_OK when the added camera works; else one line with its state, reason and detail, and EXIT_FAILURE."""
    state = first_state(reply, args.name)
    if state is None:
        print(f"vcascade camera add: {args.name}: still {camera.get('state')} after {args.wait_s:.0f} s",
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILURE
    if state in FAULT_STATES:
        why = camera.get("error") or camera.get("detail") or ""
        print(f"vcascade camera add: {args.name}: {state} ({camera.get('reason')})" + (f": {why}" if why else ""),
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILURE
    return EXIT_OK
