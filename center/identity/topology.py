"""Camera topology pruning: which identities a new ROI may be compared with (pure; no I/O).

An object seen on camera L at time t_L can reappear on camera C at time t only if L is C, or the topology links
L to C and ``min_s <= t - t_L <= max_s`` (the link's travel time window). Matching a new ROI only against the
identities that pass this test cuts comparisons and false matches (ReXCam, Jain et al., SenSys 2021: "spatial and
temporal correlations"; Argus). Cameras named in no link are not pruned: their ROIs compare with every identity,
and identities last seen on them are candidates everywhere; so are identities with no known camera.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

UNKNOWN = -1
"""Code of a camera the topology does not name."""


class Topology:
    """Directed camera links with travel time windows, as dense (C, C) matrices over the named cameras.

    Args:
        links: ``(source, target, min_s, max_s)`` per link; a repeated pair keeps the widest window.

    Raises:
        ValueError: ``max_s < min_s`` or a negative ``min_s``.
    """

    def __init__(self, links: Iterable[tuple[str, str, float, float]]) -> None:
        links = list(links)
        for source, target, min_s, max_s in links:
            if min_s < 0 or max_s < min_s:
                raise ValueError(f"link {source}->{target}: window [{min_s}, {max_s}] s is not 0 <= min_s <= max_s")
        names = sorted({name for link in links for name in link[:2]})
        self._code = {name: code for code, name in enumerate(names)}
        n = len(names)
        self._min_s = np.full((n, n), np.nan)  # [source, target]; NaN: no link
        self._max_s = np.full((n, n), np.nan)
        for source, target, min_s, max_s in links:
            i, j = self._code[source], self._code[target]
            self._min_s[i, j] = np.fmin(self._min_s[i, j], min_s)
            self._max_s[i, j] = np.fmax(self._max_s[i, j], max_s)

    @classmethod
    def from_config(cls, cfg) -> "Topology":
        """From a :class:`vcascade.core.schema.identity.TopologyConfig`."""
        return cls((link.source, link.target, link.min_s, link.max_s) for link in cfg.links)

    @property
    def cameras(self) -> list[str]:
        """The cameras named in links, in code order."""
        return list(self._code)

    def code(self, camera: str) -> int:
        """The camera's code, :data:`UNKNOWN` when no link names it."""
        return self._code.get(camera, UNKNOWN)

    def candidates(self, camera: str, t_s: float, last_codes: np.ndarray, last_t_s: np.ndarray) -> np.ndarray:
        """Which identities a ROI of ``camera`` at ``t_s`` may be compared with.

        Args:
            camera: the ROI's camera name.
            t_s: the ROI's time, s (same clock as ``last_t_s``).
            last_codes: int (n,), :meth:`code` of each identity's last camera (:data:`UNKNOWN` when unnamed).
            last_t_s: float (n,), each identity's last sighting time, s.

        Returns:
            bool (n,): True for the candidates.
        """
        target = self.code(camera)
        last_codes = np.asarray(last_codes)
        if target == UNKNOWN:
            return np.ones(len(last_codes), dtype=bool)
        source = np.where(last_codes == UNKNOWN, 0, last_codes)
        elapsed_s = t_s - np.asarray(last_t_s, dtype=np.float64)
        with np.errstate(invalid="ignore"):  # NaN windows (no link) compare False
            linked = (elapsed_s >= self._min_s[source, target]) & (elapsed_s <= self._max_s[source, target])
        return (last_codes == UNKNOWN) | (last_codes == target) | linked
