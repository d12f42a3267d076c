"""Critical participation (SnailTrail's CP) of each PAG edge, by dynamic programming.

Over all paths from a source node to a sink node, an edge u -> v lies on
C(e) = paths_in(u) * paths_out(v) of them: paths_in counts the paths from a source to
u (one forward pass in topological order), paths_out those from v to a sink (one
backward pass), with no enumeration. Then

    CP(e) = C(e) * w(e) / sum over edges f of C(f) * w(f),

the share of the summed length of all source-to-sink paths that e makes up, so the
values of a snapshot sum to 1. With SnailTrail's contiguous timelines every such path
spans the window [t_s, t_e], the denominator is N * (t_e - t_s) for N paths and this
is exactly their CP_a = C(a) * w_a / (N * (t_e - t_s)).

Counts grow exponentially with the messages between timelines, so they are exact
Python ints; each is turned into a float mantissa and a binary exponent, and the
products are scaled by the largest exponent, so nothing overflows. Linear in the
edges, apart from sorting them once each way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .pag import Pag

_BITS = 62  # mantissa bits kept from a count: floats hold 53, the rest rounds away
_SMALL = 1 << _BITS


def path_counts(pag: Pag, sources: Iterable[int] | None = None,
                sinks: Iterable[int] | None = None) -> tuple[list[int], list[int]]:
    """(paths_in, paths_out) per node: the source-to-node and node-to-sink path counts.

    Sources default to the nodes with no in-edges, sinks to those with no out-edges.
    """
    n = len(pag.times)
    if sources is None:
        has_in = [False] * n
        for e in pag.edges:
            has_in[e.v] = True
        sources = (i for i in range(n) if not has_in[i])
    if sinks is None:
        has_out = [False] * n
        for e in pag.edges:
            has_out[e.u] = True
        sinks = (i for i in range(n) if not has_out[i])
    p_in, p_out = [0] * n, [0] * n
    for i in sources:
        p_in[i] = 1
    for i in sinks:
        p_out[i] = 1
    # Every edge goes forward in (time, id) (Pag.edge checks it): taking edges by their
    # tail's rank in that order, all edges into a tail come first, so its count is
    # complete when it is passed on (and backwards alike). Sorts with C-level keys.
    rank = [0] * n
    for r, i in enumerate(sorted(range(n), key=pag.times.__getitem__)):  # stable: ties by id
        rank[i] = r
    us = [e.u for e in pag.edges]
    vs = [e.v for e in pag.edges]
    by_u = [rank[u] for u in us]
    by_v = [rank[v] for v in vs]
    for k in sorted(range(len(us)), key=by_u.__getitem__):
        if p_in[us[k]]:
            p_in[vs[k]] += p_in[us[k]]
    for k in sorted(range(len(vs)), key=by_v.__getitem__, reverse=True):
        if p_out[vs[k]]:
            p_out[us[k]] += p_out[vs[k]]
    return p_in, p_out


def _split(x: int) -> tuple[float, int]:
    """x as (mantissa, exponent): x ~ mantissa * 2**exponent, the mantissa < 2**62."""
    if x < _SMALL:
        return float(x), 0
    shift = x.bit_length() - _BITS
    return float(x >> shift), shift


def critical_participation(pag: Pag, sources: Iterable[int] | None = None,
                           sinks: Iterable[int] | None = None) -> list[float]:
    """CP of each edge of `pag` (in `pag.edges` order): sums to 1, or all 0 if no path
    between `sources` and `sinks` has any length.

    Example:
        >>> g = Pag(0.0, 3.0)
        >>> a, b, c = g.node(0.0), g.node(1.0), g.node(3.0)
        >>> _ = g.edge(a, b, "processing"), g.edge(b, c, "idle"), g.edge(a, c, "transfer")
        >>> [round(x, 3) for x in critical_participation(g)]
        [0.167, 0.333, 0.5]
    """
    p_in, p_out = path_counts(pag, sources, sinks)
    ins = [_split(x) for x in p_in]
    outs = [_split(x) for x in p_out]
    live: list[tuple[int, float, int]] = []  # (edge, mantissa * weight, exponent)
    for k, e in enumerate(pag.edges):
        if e.weight > 0 and p_in[e.u] and p_out[e.v]:
            (ma, ea), (mb, eb) = ins[e.u], outs[e.v]
            live.append((k, ma * mb * e.weight, ea + eb))
    out = [0.0] * len(pag.edges)
    if not live:
        return out
    top = max(x[2] for x in live)
    for k, x, ex in live:
        out[k] = math.ldexp(x, ex - top) if ex != top else x
    total = math.fsum(out)
    return [x / total for x in out] if total > 0 else out
