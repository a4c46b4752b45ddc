"""Choose where to split a chain of units into K pipeline stages so the slowest stage is as fast as possible.

Pure Python (no torch or ONNX imports): the input is a list of per-unit costs in execution order (ms per
micro-batch, from :mod:`vcascade.center.stages.profile`) and the unit indices where a stage may begin; the output is a
:class:`Plan`. A pipeline's steady-state rate is set by its slowest stage, so the objective is the
*bottleneck* (max stage cost), not the total.

This is the linear partition problem, solved exactly by dynamic programming in O(K * m^2) for m allowed
boundaries: S. Skiena, *The Algorithm Design Manual*, 2nd ed. (Springer 2008), section 8.5 "The Partition
Problem", recurrence ``M[n, k] = min_i max(M[i, k-1], sum_{j=i+1..n} s_j)``. Here the recurrence runs over the
allowed boundaries only (units between two allowed boundaries cannot be separated, so they are summed first).
The tests check the DP against enumerating every combination of cuts, on random and real profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Plan:
    """K stages over ``n`` units: stage ``k`` runs units ``bounds[k]:bounds[k+1]``.

    Attributes:
        cuts: the K-1 unit indices where stages 1..K-1 begin, strictly increasing, each in ``1..n-1``.
        stage_ms: the K predicted stage costs, ms per micro-batch (sums of their units' costs).
    """

    cuts: tuple[int, ...]
    stage_ms: tuple[float, ...]

    @property
    def max_ms(self) -> float:
        """The bottleneck: the slowest stage's predicted cost, ms."""
        return max(self.stage_ms)

    @property
    def total_ms(self) -> float:
        """Sum of all stage costs, ms (the unsplit model's predicted cost)."""
        return sum(self.stage_ms)

    @property
    def ratio(self) -> float:
        """Balance ratio: slowest stage / mean stage (1.0 = perfectly balanced; 0 total gives 1.0)."""
        mean = self.total_ms / len(self.stage_ms)
        return self.max_ms / mean if mean > 0 else 1.0


def plan_for_cuts(costs_ms: Sequence[float], cuts: Sequence[int]) -> Plan:
    """The :class:`Plan` of given cuts: per-stage sums of ``costs_ms`` (ms, one per unit, execution order).

    Raises:
        ValueError: cuts not strictly increasing inside ``1..len(costs_ms)-1``.
    """
    n = len(costs_ms)
    bounds = [0, *cuts, n]
    if any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"cuts {list(cuts)} must be strictly increasing inside 1..{n - 1}")
    prefix = _prefix_sums(costs_ms)
    return Plan(tuple(cuts), tuple(prefix[b] - prefix[a] for a, b in zip(bounds, bounds[1:])))


def balance(costs_ms: Sequence[float], num_stages: int, allowed: Sequence[int] | None = None) -> Plan:
    """Cut ``costs_ms`` into ``num_stages`` stages minimising the slowest stage (exact DP, see module docstring).

    Args:
        costs_ms: per-unit cost, ms per micro-batch, in execution order; each >= 0.
        num_stages: K >= 1.
        allowed: unit indices where a stage may begin (default: every index ``1..n-1``).

    Returns:
        The optimal plan (ties broken toward earlier cuts).

    Raises:
        ValueError: K < 1, a negative cost, an allowed index outside ``1..n-1``, or fewer than K-1 allowed cuts.
    """
    positions = _check(costs_ms, num_stages, allowed)
    if num_stages == 1:
        return plan_for_cuts(costs_ms, ())
    prefix = _prefix_sums(costs_ms)
    bounds = [0, *positions, len(costs_ms)]  # boundary j sits before unit bounds[j]
    last = len(bounds) - 1
    # best[k][j]: min bottleneck of units [0, bounds[j]) in k stages; back[k][j]: the boundary before its last stage
    best = [[prefix[b] for b in bounds]]
    back: list[list[int]] = [[0] * len(bounds)]
    for k in range(2, num_stages + 1):
        row, links = [float("inf")] * len(bounds), [0] * len(bounds)
        for j in range(k, last + 1):  # k non-empty stages need k boundaries after 0
            for i in range(k - 1, j):
                cost = max(best[-1][i], prefix[bounds[j]] - prefix[bounds[i]])
                if cost < row[j]:
                    row[j], links[j] = cost, i
        best.append(row)
        back.append(links)
    cuts, j = [], last
    for k in range(num_stages - 1, 0, -1):
        j = back[k][j]
        cuts.append(bounds[j])
    return plan_for_cuts(costs_ms, tuple(reversed(cuts)))


def _check(costs_ms: Sequence[float], num_stages: int, allowed: Sequence[int] | None) -> list[int]:
    """Validate the inputs; returns the sorted, distinct allowed cut indices."""
    n = len(costs_ms)
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    if any(c < 0 for c in costs_ms):
        raise ValueError("unit costs must be >= 0 ms")
    positions = sorted(set(range(1, n) if allowed is None else allowed))
    if positions and (positions[0] < 1 or positions[-1] > n - 1):
        raise ValueError(f"allowed cut indices must be inside 1..{n - 1}, got {positions[0]}..{positions[-1]}")
    if len(positions) < num_stages - 1:
        raise ValueError(f"{num_stages} stages need {num_stages - 1} cut points; only {len(positions)} are possible")
    return positions


def _prefix_sums(costs_ms: Sequence[float]) -> list[float]:
    prefix = [0.0]
    for cost in costs_ms:
        prefix.append(prefix[-1] + float(cost))
    return prefix
