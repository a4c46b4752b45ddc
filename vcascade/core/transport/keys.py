"""``vcascade keys``: write CurveZMQ keypairs for the components of a deployment (docs/SECURITY.md).

Keys are made by pyzmq's own :func:`zmq.auth.create_certificates` (libzmq's ``zmq_curve_keypair``, a
Curve25519 keypair from the OS random source): ``NAME.key`` holds the public key, ``NAME.key_secret`` both keys
and is made readable by its owner only (mode 0600).
"""

from __future__ import annotations

import os
from pathlib import Path

import zmq.auth
from pydantic import TypeAdapter, ValidationError

from vcascade.core.config import Deployment, Name
from vcascade.core.transport.security import key_files

SECRET_MODE = 0o600
"""File mode of secret key files: owner read/write only."""


class KeysExist(FileExistsError):
    """Secret key files already exist and ``force`` was not given. Recovery: pick another folder, or force."""


def component_names(deployment: Deployment) -> list[str]:
    """Every broker, edge, worker and stage-group name of the deployment, in file order (one keypair each)."""
    return [*deployment.brokers, *deployment.edges, *deployment.workers, *deployment.stage_groups]


def generate_keys(keys_dir: str | Path, names: list[str], *, force: bool = False) -> list[Path]:
    """Write one keypair per name into ``keys_dir`` (created with mode 0700 when missing).

    Args:
        keys_dir: output folder.
        names: component names (the config's name pattern: letters, digits, ``_.-``).
        force: overwrite existing key files.

    Returns:
        The secret key files written, in ``names`` order.

    Raises:
        KeysExist: some ``NAME.key_secret`` exists and ``force`` is False; nothing is written then.
        ValueError: a name is empty, repeated or not a valid component name.
        OSError: the folder or a file cannot be written.
    """
    _check_names(names)
    folder = Path(keys_dir)
    existing = [str(key_files(folder, n)[1]) for n in names if key_files(folder, n)[1].exists()]
    if existing and not force:
        raise KeysExist(f"secret key files exist (use --force to replace them): {', '.join(existing)}")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    written = []
    for name in names:
        _, secret = key_files(folder, name)
        secret.unlink(missing_ok=True)  # so the fresh file is never readable by others, even for a moment
        old_umask = os.umask(0o077)
        try:
            zmq.auth.create_certificates(folder, name)
        finally:
            os.umask(old_umask)
        os.chmod(secret, SECRET_MODE)
        os.chmod(key_files(folder, name)[0], 0o644)
        written.append(secret)
    return written


def _check_names(names: list[str]) -> None:
    if not names:
        raise ValueError("no component names given")
    if len(set(names)) != len(names):
        raise ValueError(f"repeated names in {names}")
    adapter = TypeAdapter(Name)
    for name in names:
        try:
            adapter.validate_python(name)
        except ValidationError:
            raise ValueError(f"{name!r}: expected a component name (letters, digits, '_', '.', '-')") from None
