"""What `vcascade run` prints: the start-up line, the live progress line from the children's snapshots and the
end-of-run summary tables (rich)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from vcascade.core.config import Deployment

Snapshots = dict[tuple[str, str], dict[str, Any]]


def _cameras(snapshots: Snapshots) -> dict[str, dict[str, Any]]:
    cams: dict[str, dict[str, Any]] = {}
    for (kind, _), snap in sorted(snapshots.items()):
        if kind == "edge":
            cams.update(snap.get("cameras", {}))
    return cams


def starting_line(dep: Deployment) -> str:
    """What the start-up waits for, printed before it (workers load, export and profile their recognizers first:
    seconds to minutes with nothing else on screen), e.g. ``starting 1 broker, 2 workers, 1 edge: ...``."""
    counts = [f"{len(section)} {kind}{'' if len(section) == 1 else 's'}"
              for kind, section in (("broker", dep.brokers), ("stage group", dep.stage_groups),
                                    ("worker", dep.workers), ("edge", dep.edges)) if section]  # fmt: skip
    return (f"starting {', '.join(counts)}: the edges start once every worker has loaded and split its "
            "recognizer")


def progress_line(snapshots: Snapshots, elapsed_s: float) -> str:
    """``frames | ROIs sent/results/drops | results/s | e2e p50/p99 | elapsed`` over all cameras."""
    cams = _cameras(snapshots).values()
    frames = sum(c["frames"] for c in cams)
    sent = sum(c["sent"] for c in cams)
    results = sum(c["results"] for c in cams)
    drops = sum(sum(c["drops"].values()) for c in cams)
    p50 = max((c["p50_ms"] for c in cams if c["p50_ms"] is not None), default=None)
    p99 = max((c["p99_ms"] for c in cams if c["p99_ms"] is not None), default=None)
    lat = f"e2e p50 {p50:.0f} ms p99 {p99:.0f} ms" if p50 is not None else "e2e -"
    rate = results / elapsed_s if elapsed_s > 0 else 0.0
    return (
        f"frames {frames} | ROIs sent {sent} results {results} drops {drops} | "
        f"{rate:.1f} results/s | {lat} | {elapsed_s:.0f} s"
    )


def summary_tables(snapshots: Snapshots, elapsed_s: float) -> list[Table]:
    """Per-camera accounting and latency, one row per broker and worker, then (when edges have sinks) one row per
    edge sink with its lines written and lost. ``fps`` is each camera's measured decode rate (frames/s from its
    first to its last frame, :attr:`vcascade.edge.capture.source.CameraReader.decode_fps`), ``-`` before two frames;
    ``decoder`` the decoder it used (``software``, ``cuda``, ``qsv``), the hardware ones it could not use listed
    below the table (:func:`decoder_fallbacks`).

    The camera table's cells stay short (the state column holds the state word only), so a long failure reason
    never squeezes the other columns; each camera's fault (:func:`camera_faults`) and its frames lost or damaged
    (:func:`frame_losses`) are listed below the table."""
    cameras = _cameras(snapshots)
    faults = camera_faults(cameras) + removed_cameras(cameras) + frame_losses(cameras) + decoder_fallbacks(cameras)
    cams = Table(title=f"vcascade run summary ({elapsed_s:.1f} s)", caption="\n".join(faults) or None,
                 caption_justify="left")  # fmt: skip
    for col in ("camera", "state", "frames", "fps", "decoder", "sent", "results", "drops", "accounted", "p50 ms",
                "p99 ms"):
        cams.add_column(col, justify="left" if col in ("camera", "state", "drops") else "right",
                        no_wrap=col != "drops")
    for name, c in sorted(cameras.items()):
        dropped = sum(c["drops"].values())
        ok = c["sent"] == c["results"] + dropped
        drops = ", ".join(f"{r} {n}" for r, n in sorted(c["drops"].items())) or "0"
        cams.add_row(
            name, "removed" if c.get("removal") else c["state"], str(c["frames"]),
            f"{c['fps']:.1f}" if c.get("fps") is not None else "-", c.get("decoder", "-"), str(c["sent"]),
            str(c["results"]), drops, "yes" if ok else "NO",
            f"{c['p50_ms']:.0f}" if c["p50_ms"] is not None else "-",
            f"{c['p99_ms']:.0f}" if c["p99_ms"] is not None else "-",
        )
    center = Table(title="brokers and workers")
    for col in ("process", "counts"):
        center.add_column(col)
    for (kind, name), snap in sorted(snapshots.items()):
        if kind == "edge":
            continue
        counts = ", ".join(f"{k} {_fmt(v)}" for k, v in snap.items() if k not in ("component", "name", "final"))
        center.add_row(f"{kind} {name}", counts)
    sinks = _sinks_table(snapshots)
    return [cams, center] if sinks is None else [cams, center, sinks]


def decoder_fallbacks(cameras: dict[str, dict[str, Any]]) -> list[str]:
    """One line per camera that could not use a hardware decoder it was set to try (``decoder_fallbacks``:
    ``"device:reason"`` -> openings; :mod:`vcascade.edge.capture.hwdecode`), sorted by camera name."""
    lines = []
    for name, c in sorted(cameras.items()):
        if fallbacks := c.get("decoder_fallbacks"):
            detail = ", ".join(f"{key.replace(':', ' ', 1)} {n}" for key, n in sorted(fallbacks.items()))
            lines.append(f"camera {name}: decoding with {c.get('decoder', 'software')}; hardware not used ({detail})")
    return lines


def camera_faults(cameras: dict[str, dict[str, Any]]) -> list[str]:
    """One line per camera that failed, ended with an error, or never delivered a frame, sorted by camera name.

    ``cameras``: the edges' camera snapshots by name (``state``, ``frames``, ``error``; ``reason``, the fixed word
    of the last state change, and ``fault`` and ``detail``, the latest fault since it last streamed, when the edge
    reports them). A camera that read no frame at all
    is a fault even when it ``ended`` without an error: after Ctrl-C a camera that never connected ends as
    ``stopped`` like any other, so its zero frames (and its last fault) are the only trace of its fault.
    A camera removed at run time (``removal`` set, ``vcascade camera remove``) is never a fault: it was stopped on
    purpose (:func:`removed_cameras` lists it).
    """
    lines = []
    for name, c in sorted(cameras.items()):
        if c.get("removal"):
            continue
        reason = f" ({c['reason']})" if c.get("reason") else ""
        if c.get("error"):
            lines.append(f"camera {name}: {c['state']}{reason}: {c['error']}")
        elif c["frames"] == 0 and c["state"] in ("ended", "failed"):
            last = f"; last fault {c['fault']}: {c.get('detail')}" if c.get("fault") else ""
            lines.append(f"camera {name}: {c['state']}{reason} without reading a frame (never connected{last})")
    return lines


def removed_cameras(cameras: dict[str, dict[str, Any]]) -> list[str]:
    """One line per camera removed at run time (``removal``: ``closed`` once every ROI it sent has a result or a
    drop, ``removing`` before; :class:`vcascade.edge.camera_set.CameraSet`), sorted by camera name. Not a problem:
    its books are checked like any other camera's."""
    lines = []
    for name, c in sorted(cameras.items()):
        if c.get("removal"):
            books = "books closed" if c["removal"] == "closed" else "books still open at stop"
            lines.append(f"camera {name}: removed at run time after {c['frames']} frames ({books})")
    return lines


def frame_losses(cameras: dict[str, dict[str, Any]]) -> list[str]:
    """One line per camera whose reader counted frames lost or damaged (``losses``: count by reason, e.g.
    ``pts_gap``, ``corrupt``; :mod:`vcascade.edge.capture.av_reader`), sorted by camera name."""
    lines = []
    for name, c in sorted(cameras.items()):
        losses = {reason: n for reason, n in (c.get("losses") or {}).items() if n}
        if losses:
            detail = ", ".join(f"{reason} {n}" for reason, n in sorted(losses.items()))
            lines.append(f"camera {name}: {sum(losses.values())} frames lost or damaged ({detail})")
    return lines


def _sinks_table(snapshots: Snapshots) -> Table | None:
    """Lines each edge sink wrote (by status) and lost (by reason), and the records its history store
    (docs/HISTORY.md) stored (by kind) and dropped (by reason); None when no edge has a sink or a history."""
    rows = [
        (f"edge {name}", label, stats)
        for (kind, name), snap in sorted(snapshots.items()) if kind == "edge"
        for label, stats in [*snap.get("sinks", {}).items(), *_history_row(snap)]
    ]  # fmt: skip
    if not rows:
        return None
    table = Table(title="edge sinks")
    for col in ("process", "sink", "lines written", "lines lost"):
        table.add_column(col)
    for process, label, stats in rows:
        written = ", ".join(f"{status} {n}" for status, n in sorted(stats["written"].items())) or "0"
        lost = ", ".join(f"{reason} {n}" for reason, n in sorted(stats["lost"].items())) or "0"
        table.add_row(process, label, written, lost)
    return table


def _history_row(snap: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The edge's history as a row of the sinks table: stored records as written, dropped ones as lost."""
    books = snap.get("history")
    return [] if books is None else [("history", {"written": books["stored"], "lost": books["dropped"]})]


def restarts_table(components: list[dict[str, Any]]) -> Table:
    """Components the launcher restarted or gave up (rows of :meth:`vcascade.app.launcher.Launcher.status`)."""
    table = Table(title="restarted components")
    for col in ("process", "restarts", "exit codes of past runs", "state"):
        table.add_column(col)
    for c in components:
        state = "given up (restart storm)" if c["gave_up"] else "running" if c["alive"] else "stopped"
        codes = ", ".join(str(code) for code in c["exit_codes"])
        table.add_row(f"{c['kind']} {c['name']}", str(c["restarts"]), codes, state)
    return table


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}" if value else "{}"
    return str(value)
