"""``vcascade camera add|remove|list``: change the cameras of a running edge over its control socket
(:mod:`vcascade.app.control_client`).

    vcascade camera add    --config FILE --edge EDGE --name CAM --url URL [--set KEY=VALUE ...]
    vcascade camera remove --config FILE --edge EDGE --name CAM [--wait-s S]
    vcascade camera list   --config FILE --edge EDGE

With CurveZMQ on, this command connects with the keypair ``--key NAME`` (default: the edge's own, so it works on
the edge's host). ``--set`` takes any camera setting of the file (docs/CONFIG.md, ``cameras.<name>``), its value
read as YAML (``--set realtime=true --set detect_fps=5``). ``remove`` waits until the camera's books are closed
(every ROI it sent has a result or a drop) and prints them.

Prints JSON; exit codes: 0 done, 1 refused, unreachable or not closed in time, 2 invalid configuration/usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from vcascade.app.commands import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from vcascade.app.control_client import ControlUnreachable, request, wait_closed
from vcascade.core.config import load_config
from vcascade.core.control_protocol import CameraAdd, CameraList, CameraRemove, Reply
from vcascade.core.security import SecurityError


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The ``add``, ``remove`` and ``list`` subcommands."""
    ops = parser.add_subparsers(dest="camera_command", required=True)
    add = _op_parser(ops, "add", "start reading a new camera on the edge")
    add.add_argument("--url", required=True, help="video file, rtsp(s)://, http(s)://, device://N, package://")
    add.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another camera setting")
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
    return EXIT_OK
