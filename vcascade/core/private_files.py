"""Files and folders that hold personal data (identity stores, result and event sinks, evidence folders): created
readable by their owner only, ``0600`` files in ``0700`` folders, unless the configuration says otherwise.

Results and identities describe people (an embedding of every person seen, where and when they were seen), so
another local user must not read them by default (GDPR art. 32, "security of processing"). A mode from the
configuration may open them to a group (``0640``/``0750``), e.g. for a log shipper; modes are applied when this
process creates the file or folder, and an existing file found more open than configured is tightened (logged).
The process's umask can only remove bits from these modes, never add any.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

from pydantic import BeforeValidator, Field

log = logging.getLogger(__name__)

FILE_MODE = 0o600
"""Default mode of a file holding personal data: read and write by its owner only."""
DIR_MODE = 0o700
"""Default mode of a folder created for such files: its owner only."""


def parse_mode(value: Any) -> Any:
    """A permission mode from YAML: an int (``0o640`` written as ``0640`` is read by YAML 1.1 as octal already, or
    ``416``), or an octal string (``"0640"``, ``"0o640"``, ``"640"``). Anything else is passed on for pydantic to
    refuse."""
    if isinstance(value, str):
        text = value.strip().lower().removeprefix("0o")
        try:
            return int(text, 8)
        except ValueError:
            return value
    return value


def mode_field(default: int, what: str) -> Any:
    """A config field holding a permission mode for ``what`` (``file``, ``folder``): 0..0o777, octal strings
    accepted (:func:`parse_mode`)."""
    return Field(
        default, ge=0, le=0o777,
        description=f"Permission mode of each {what} this creates (octal, e.g. `0o{default:o}`: owner only); "
        "it holds personal data.",
    )


Mode = BeforeValidator(parse_mode)
"""Annotate a mode field with this so octal strings are read: ``Annotated[int, Mode] = mode_field(...)``."""


def make_private_dir(path: str | os.PathLike[str], mode: int = DIR_MODE) -> Path:
    """Create folder ``path`` and its missing parents with ``mode`` (folders that exist are left as they are).

    Returns:
        The folder's path.

    Raises:
        OSError: a folder cannot be created.
    """
    path = Path(path).expanduser()
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=mode)
        except FileExistsError:
            continue
        os.chmod(folder, mode)  # mkdir's mode is masked by the umask; the configured mode is meant
    return path


def open_private(path: str | os.PathLike[str], flags: int, mode: int = FILE_MODE, dir_mode: int = DIR_MODE) -> int:
    """``os.open(path, flags | O_CREAT | O_CLOEXEC, mode)`` with its folder made by :func:`make_private_dir`; an
    existing file more open than ``mode`` is tightened to it.

    Returns:
        The file descriptor.

    Raises:
        OSError: the folder or file cannot be created or opened.
    """
    path = Path(path).expanduser()
    make_private_dir(path.parent, dir_mode)
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        _tighten(fd, path, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_private(path: str | os.PathLike[str], mode: int = FILE_MODE, dir_mode: int = DIR_MODE) -> Path:
    """Create the empty file ``path`` with ``mode`` if it is missing (for files another library then opens, such as
    SQLite, which gives its ``-wal`` and ``-shm`` files the main file's mode), tightening an existing one.

    Raises:
        OSError: the folder or file cannot be created.
    """
    os.close(open_private(path, os.O_RDWR, mode, dir_mode))
    return Path(path).expanduser()


def _tighten(fd: int, path: Path, mode: int) -> None:
    """Remove from the open file the permission bits ``mode`` does not grant (bits beyond it only)."""
    current = stat.S_IMODE(os.fstat(fd).st_mode)
    if current & ~mode:
        log.warning("%s: mode %o is more open than the configured %o; tightened", path, current, mode)
        os.fchmod(fd, current & mode)
