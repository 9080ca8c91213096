"""The device-count space and the integer knapsack over it.

A cell is a vector of device counts, one per device type (profile × node link): the
devices one pipeline takes. If ub[c] bounds the output tok/s of any one pipeline on the
devices of cell c, then the best sum of ub over cells that together fit the cluster
bounds every plan of such pipelines, integrality included: an unbounded knapsack in as
many dimensions as there are types, solved exactly by dynamic programming over the cells
in order of their total. Prefill and decode pools combine as decode output limited by
what prefill pools feed, where what a prefill pool feeds depends on which device types the decode
pools take (the KV routes open to it: cell_bound.py).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CountSpace", "closure", "combine", "decompose"]


class CountSpace:
    """Every vector of device counts up to the cluster's, as rows of `cells` [C, T]."""

    def __init__(self, devices: np.ndarray) -> None:
        self.devices = devices.astype(np.int64)
        self.dims = tuple(int(n) + 1 for n in self.devices)
        self.cells = np.indices(self.dims).reshape(len(self.dims), -1).T  # row-major: index = cells @ strides
        self.strides = np.array([int(np.prod(self.dims[k + 1 :])) for k in range(len(self.dims))], dtype=np.int64)
        self.total = self.cells.sum(axis=1)
        self.order = np.argsort(self.total, kind="stable")
        self.full = len(self.cells) - 1  # every device of the cluster
        # one closure's work in the refinement budget's unit (cell_bound.WORK_PER_SECOND): a
        # python step per cell, and the sub-box of every cell
        self.closure_work = 400.0 * len(self.cells) + float(np.prod([(n + 1) * (n + 2) / 2 for n in self.devices])) / 25

    def __len__(self) -> int:
        return len(self.cells)


def _box(v: np.ndarray) -> tuple[slice, ...]:
    """The cells ≤ v, as slices of the count grid."""
    return tuple(slice(0, int(x) + 1) for x in v)


def _flip(v: np.ndarray) -> tuple[slice, ...]:
    """v − (the cells ≤ v), aligned with _box(v)."""
    return tuple(slice(int(x), None, -1) if x else slice(0, 1) for x in v)


def closure(space: CountSpace, ub: np.ndarray) -> np.ndarray:
    """K[c] = the largest sum of ub over a multiset of cells whose sum is ≤ c."""
    item = ub.reshape(space.dims).copy()
    item.flat[0] = -np.inf  # the empty pipeline is no item
    K = np.zeros(space.dims)
    for c in space.order[1:]:
        v = space.cells[c]
        K.flat[c] = (item[_box(v)] + K[_flip(v)]).max()
    return K.ravel()


def combine(space: CountSpace, both: np.ndarray, decode: np.ndarray, prefill: np.ndarray, route: np.ndarray) -> tuple[float, tuple]:
    """max over c1 + c2 + c3 ≤ the cluster of both[c1] + min(decode[c2], prefill[route[c2], c3])
    (closures), and the maximising (c1, c2, c3).

    Args:
        prefill: [sets, cells]: the prefill pools' closure under each set of KV routes.
        route: per cell (the decode pools' devices), the row of `prefill` whose routes they open.
    """
    D, R = decode.reshape(space.dims), route.reshape(space.dims)
    P = prefill.reshape((len(prefill), *space.dims))
    fed = np.zeros(len(space))  # fed[c]: the best pools on the devices of c
    split = np.zeros(len(space), dtype=np.int64)  # …and the decode pools' cell
    if decode.any() and prefill.any():
        for c in space.order[1:]:
            v = space.cells[c]
            box = _box(v)
            if len(P) == 1:  # one set of routes (no KV cap tells decode pools' types apart)
                fed_by = P[0][_flip(v)]
            else:  # prefill on c − c2, under the routes c2's decode pools open
                fed_by = np.take_along_axis(P[(slice(None), *_flip(v))], R[box][None], axis=0)[0]
            m = np.minimum(D[box], fed_by)
            j = int(np.argmax(m))
            fed[c] = m.flat[j]
            split[c] = int(np.ravel_multi_index(np.unravel_index(j, m.shape), space.dims))
    total = both + fed.reshape(space.dims)[_flip(space.cells[space.full])].ravel()
    c1 = int(np.argmax(total))
    r = space.full - c1
    c2 = int(split[r])
    return float(total[c1]), (c1, c2, r - c2)


def decompose(space: CountSpace, ub: np.ndarray, K: np.ndarray, c: int) -> list[int]:
    """The cells (pipelines) of one multiset that attains K[c]."""
    item = ub.reshape(space.dims)
    Kg = K.reshape(space.dims)
    out = []
    while c and K[c] > 1e-12:
        v = space.cells[c]
        vals = item[_box(v)] + Kg[_flip(v)]
        vals.flat[0] = -np.inf
        j = int(np.argmax(vals))
        pick = int(np.ravel_multi_index(np.unravel_index(j, vals.shape), space.dims))
        if ub[pick] > 0:  # else the best leaves these devices idle
            out.append(pick)
        c -= pick
    return out
