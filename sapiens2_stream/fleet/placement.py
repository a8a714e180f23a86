"""Which worker runs which camera: first-fit decreasing by measured cost, with headroom kept for failover.

A worker's capacity is the frames/s it measured it can process live (this pipeline, these models, this device, in
the micro-batches that fit the latency budget); a camera's demand is the frames/s it will process: its rate, capped
by the largest capacity, since one camera's frames are processed by one worker within the latency budget and what
is beyond that is dropped as too old rather than queued. Demand and capacity are in the same unit, so the cost per
frame cancels: a camera takes `demand / capacity` of a worker. Healthy cameras never move: only cameras without a
(living) worker are placed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Placement:
    assignment: dict[str, str]  # camera -> worker
    load: dict[str, float]  # worker -> frames/s placed on it
    # cameras that will run below their rate: camera -> the share of its frames/s it will get (< 1)
    below_rate: dict[str, float] = field(default_factory=dict)


def place(
    demands: dict[str, float],
    capacities: dict[str, float],
    headroom: float = 0.2,
    current: dict[str, str] | None = None,
    pins: dict[str, str] | None = None,
    nodes: dict[str, str] | None = None,
    use_headroom: bool = False,
) -> Placement:
    """Place every camera of `demands` (its rate, frames/s) on the workers of `capacities` (frames/s each).

    `current`: cameras already running and where; they stay where they are while their worker is in
    `capacities`. `pins`: camera -> node (soft: a worker on that node is tried first). `nodes`: worker -> node.
    New cameras fill each worker up to `(1 - headroom)` of its capacity; `use_headroom` lets them use the spare
    share too (moving a lost machine's cameras: that is what the headroom is kept for). A camera that fits
    nowhere goes to the worker with the most room left, and `below_rate` says which cameras will run slower
    than their rate and how much (faster than any worker can serve, on a crowded worker, or both).
    """
    if not capacities:
        raise ValueError("no workers to place cameras on")
    current, pins, nodes = current or {}, pins or {}, nodes or {}
    rates, most = demands, max(capacities.values())
    demands = {cam: min(rate, most) for cam, rate in rates.items()}
    assignment = {cam: w for cam, w in current.items() if w in capacities and cam in demands}
    load = dict.fromkeys(capacities, 0.0)
    for cam, worker in assignment.items():
        load[worker] += demands[cam]
    usable = {w: c * (1.0 if use_headroom else 1.0 - headroom) for w, c in capacities.items()}
    waiting = sorted((c for c in demands if c not in assignment), key=lambda c: (-demands[c], c))
    for cam in waiting:
        order = sorted(capacities, key=lambda w: (nodes.get(w) != pins.get(cam) if cam in pins else False, w))
        fits = [w for w in order if load[w] + demands[cam] <= usable[w] + 1e-9]
        worker = fits[0] if fits else max(order, key=lambda w: (capacities[w] - load[w], -order.index(w)))
        assignment[cam] = worker
        load[worker] += demands[cam]
    below = {}
    for cam, worker in assignment.items():
        share = min(1.0, capacities[worker] / load[worker]) * demands[cam] / rates[cam] if rates[cam] else 1.0
        if share < 1.0 - 1e-9:
            below[cam] = round(share, 3)
    return Placement(dict(sorted(assignment.items())), load, below)


def orphan_targets(orphans: list[str], lost: str, rates: dict[str, float], current: dict[str, str],
                   survivors: dict[str, float], headroom: float, wait: bool) -> dict[str, str]:  # fmt: skip
    """Where a lost worker's cameras go: onto the survivors' spare capacity (first-fit decreasing, the headroom
    used: that is what it is kept for), the others' cameras staying where they are (`current`). With `wait` (a
    free GPU for the lost worker's restart), a camera that would crowd a survivor past its capacity stays with
    `lost` instead, to continue there once it is back."""
    placement = place({c: rates[c] for c in [*current, *orphans]}, survivors, headroom, current, use_headroom=True)
    crowded = {w for w, load in placement.load.items() if load > survivors[w] + 1e-9}
    return {c: lost if wait and placement.assignment[c] in crowded else placement.assignment[c] for c in orphans}
