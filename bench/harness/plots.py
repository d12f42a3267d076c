"""PNG plots of the benchmarks' results (matplotlib, imported only when a plot is drawn):
`python -m bench.cameo`'s scenarios, `python -m bench.scaling`'s timeline, and `pyplot`
for a suite that draws its own.

Run on a `bench.cameo` results file: `python -m bench.harness.plots RESULTS.json DIR`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MODES = ("fifo", "cameo", "floor", "isolated")


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files (no display); ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_cdf(res: dict[str, Any], path: str, title: str) -> str:
    """CDF of result latency per mode, latency-sensitive dataflows solid, others dashed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, mode in enumerate(m for m in MODES if m in res):
        for name, d in res[mode]["dataflows"].items():
            cdf = d.get("cdf_ms") or []
            if not cdf:
                continue
            ax.plot([max(x, 0.01) for x in cdf], [q / 100 for q in range(len(cdf))], color=f"C{i}",
                    linestyle="-" if d.get("latency_sensitive") else "--", label=f"{mode} {name}")
    ax.set_xscale("log")
    return _finish(plt, fig, ax, path, "latency (ms, log)", "share of results", title)


def _finish(plt: Any, fig: Any, ax: Any, path: str, xlabel: str, ylabel: str, title: str) -> str:
    """Label one axis, save the figure as PNG and close it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def spike_series(res: dict[str, Any], path: str) -> str:
    """p99 of the latency-sensitive dataflow per 1 s bucket, per mode, spikes shaded."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    shaded = False
    for i, mode in enumerate(m for m in MODES if m in res):
        for name, d in res[mode]["dataflows"].items():
            if d.get("latency_sensitive") and d.get("p99_series_ms"):
                xs = [j + 0.5 for j, v in enumerate(d["p99_series_ms"]) if v is not None]
                ys = [v for v in d["p99_series_ms"] if v is not None]
                ax.plot(xs, ys, marker="o", color=f"C{i}", label=f"{mode} {name} p99")
        if not shaded:
            for d in res[mode]["dataflows"].values():
                for a, b in d.get("spikes_s", []):
                    ax.axvspan(max(a, 0), b, color="grey", alpha=0.15)
                    shaded = True
    ax.set_yscale("log")
    return _finish(plt, fig, ax, path, "seconds since the warm-up (grey: bulk spikes, as in the fifo run)",
                   "p99 latency per 1 s (ms, log)", "spike: alerts p99 over time")


def fair_shares(res: dict[str, Any], path: str, title: str = "") -> str:
    """Share of executor time per tenant per second, one panel per mode."""
    plt = pyplot()
    modes = [m for m in MODES if m in res]
    fig, axes = plt.subplots(1, len(modes), figsize=(5 * len(modes), 4), sharey=True, squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        dfs = res[mode]["dataflows"]
        series = {n: d.get("busy_series_ms", []) for n, d in dfs.items()}
        n = min((len(s) for s in series.values()), default=0)
        totals = [sum(s[j] for s in series.values()) or 1.0 for j in range(n)]
        for name, s in series.items():
            due = res[mode].get("weight_shares", {}).get(name, dfs[name].get("fair_share"))
            ax.plot([j + 1 for j in range(n)], [s[j] / totals[j] for j in range(n)], marker="o",
                    label=name + ("" if due is None else f" (due {due:.0%})"))
        ax.set_title(f"{title}{mode} ({res[mode].get('policy', mode)})")
        ax.set_xlabel("seconds since start")
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("share of executor time per 1 s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def scaling_timeline(res: dict[str, Any], out_dir: str) -> str:
    """`python -m bench.scaling`'s figure, `DIR/scaling.png`: rows sharing the time axis:
    the offered rate, the window's instances per policy with the optimum as a step line,
    and the p99 of bids' result latency per second per policy (log)."""
    plt = pyplot()
    policies = res["policies"]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    rate_ax, inst_ax, p99_ax = axes
    first = next(iter(policies.values()))
    edges = [a for a, _ in first["phase_bounds_s"]] + [first["phase_bounds_s"][-1][1]]
    rate_ax.stairs(first["rates_eps"], edges, color="black", linewidth=1.2, label="offered")
    rate_ax.set_ylabel("input events/s")
    inst_ax.stairs(first["optimum"], edges, color="grey", linewidth=3, alpha=0.4,
                   label="optimum")
    for i, (policy, r) in enumerate(policies.items()):
        ts = [x["t_s"] for x in r["timeline"]]
        inst_ax.step(ts, [x["parallelism"] for x in r["timeline"]], where="post", color=f"C{i}",
                     label=f"{policy} instances")
        inst_ax.step(ts, [x["executors"] for x in r["timeline"]], where="post", color=f"C{i}",
                     linestyle=":", linewidth=0.9, label=f"{policy} executors")
        pts = [(t, v) for t, v in r["p99_ms_per_s"] if v is not None]
        p99_ax.plot([t + 0.5 for t, _ in pts], [max(v, 1.0) for _, v in pts], color=f"C{i}",
                    marker=".", linewidth=1, label=f"{policy} p99")
    inst_ax.set_ylabel("window instances")
    p99_ax.axhline(2_000, color="C3", linestyle="--", linewidth=1, label="target 2 s")
    p99_ax.set_yscale("log")
    p99_ax.set_ylabel("bids p99 per 1 s (ms, log)")
    p99_ax.set_xlabel("seconds from the start of the trace")
    for ax in axes:
        for edge in edges[1:-1]:
            ax.axvline(edge, color="grey", linewidth=0.5, alpha=0.5)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    rate_ax.set_title(f"self-scaling: ds2 vs threshold (C = "
                      f"{res['setup']['capacity_eps']:,.0f} events/s per instance)", fontsize=10)
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "scaling.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(results: dict[str, Any], out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    if "multi" in results:
        paths.append(latency_cdf(results["multi"], os.path.join(out_dir, "multi_latency_cdf.png"),
                                 "multi: latency CDF per mode"))
    if "single" in results:
        paths.append(latency_cdf(results["single"], os.path.join(out_dir, "single_latency_cdf.png"),
                                 "single: latency CDF per mode"))
    if "spike" in results:
        paths.append(spike_series(results["spike"], os.path.join(out_dir, "spike_p99_over_time.png")))
    if "fair" in results:
        paths.append(fair_shares(results["fair"], os.path.join(out_dir, "fair_shares_over_time.png")))
    if "overload" in results:
        levels = results["overload"]["levels"]
        top = max(levels, key=float)
        paths.append(fair_shares(levels[top], os.path.join(out_dir, "overload_shares_over_time.png"),
                                 f"overload {float(top):.0%}: "))
    return paths


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        for p in write_all(json.load(f), sys.argv[2]):
            print("wrote", p)
