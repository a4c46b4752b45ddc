"""Checks across the sections of a validated deployment file, which pydantic cannot express per field.

:func:`check_deployment` runs one function per section (cameras, edges, workers, routes, recognizers, heads,
stage groups, identity topology, ports, security, previews); each returns its problems as one-line messages
naming the key path, the bad value and what was expected. They are pure: no file, device or network is touched.
The section modules only declare their keys; every check that reads more than one section lives here, so the
section modules never refer back to :class:`~vcascade.core.schema.deployment.Deployment`.

=============================================  ==========================================================
module                                         checks
=============================================  ==========================================================
:mod:`vcascade.core.schema.checks.edges`       cameras, edges, detectors' class names, routes
:mod:`vcascade.core.schema.checks.center`      workers, stage groups, recognizers, heads, identity topology
:mod:`vcascade.core.schema.checks.network`     ports, plaintext off loopback, preview tokens
:mod:`vcascade.core.schema.checks.privacy`     head-rule classes; notices of unredacted exits
=============================================  ==========================================================
"""

from __future__ import annotations

from vcascade.core.schema.checks.center import (
    check_heads,
    check_recognizers,
    check_stage_groups,
    check_topology,
    check_workers,
)
from vcascade.core.schema.checks.edges import (
    check_camera_analytics,
    check_camera_policies,
    check_cameras,
    check_edges,
    check_routing,
)
from vcascade.core.schema.checks.privacy import check_camera_privacy, privacy_notices
from vcascade.core.schema.checks.network import bound_ports, check_ports, check_previews, check_security
from vcascade.core.schema.deployment import Deployment


def check_deployment(dep: Deployment) -> list[str]:
    """Every cross-section problem of ``dep``, one message each, section by section (empty: the file is good)."""
    checks = (
        check_cameras, check_edges, check_camera_policies, check_camera_analytics, check_workers,
        check_routing, check_recognizers, check_stage_groups, check_ports, check_security, check_heads,
        check_previews, check_topology, check_camera_privacy,
    )
    return [problem for check in checks for problem in check(dep)]


__all__ = ["bound_ports", "check_deployment", "privacy_notices"]
