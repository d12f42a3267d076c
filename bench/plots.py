"""PNG plots of `python -m bench.cameo` results (matplotlib, imported only here).

Run on a results file: `python -m bench.plots RESULTS.json DIR`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MODES = ("fifo", "cameo", "floor", "isolated")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_cdf(res: dict[str, Any], path: str, title: str) -> str:
    """CDF of result latency per mode, latency-sensitive dataflows solid, others dashed."""
    plt = _plt()
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
    plt = _plt()
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
    plt = _plt()
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
