"""`bench.peers`'s table: cameo beside Spark (FAIR pools), PyFlink and Bytewax.

The JSON holds a record per system asked for (`cameo`, `spark`, `flink`, `bytewax`), each
shaped by `bench.peers.common.result`, or `{"skipped": why}` / `{"failed": why}` when the
system could not run. Latency is the same measure for every system: when the result is at
the sink, minus its event time (an alert's `ts`, a window's end); for cameo, the runner's
`*_from_event` fields, not its ingest-to-egress ones.
"""

from __future__ import annotations

from typing import Any

from bench.tables import ms, ratio

SYSTEMS = ("cameo", "spark", "flink", "bytewax")
NAMES = {"cameo": "cameo", "spark": "Spark", "flink": "PyFlink", "bytewax": "Bytewax"}

Summary = dict[str, Any]


def rate(v: float | None) -> str:
    """Events/s per core in thousands, three figures: 953 K, 31.5 K, 4.95 K."""
    if v is None:
        return ""
    return f"{v / 1e3:,.0f} K" if v >= 99_950 else f"{v / 1e3:.3g} K"


def measure(s: Summary | None, from_event: bool = False) -> dict[str, float | None]:
    """p50, p99 and the share within target of a latency summary; cameo's from event time."""
    s = s or {}
    if from_event and "p99_from_event_ms" in s:
        return {"p50": s["p50_from_event_ms"], "p99": s["p99_from_event_ms"],
                "within": s["within_target_from_event"]}
    return {"p50": s.get("p50_ms"), "p99": s.get("p99_ms"), "within": s.get("within_target")}


def latency_cells(lat: dict[str, Any] | None, from_event: bool = False) -> list[str]:
    """alerts p50 / p99, alerts within target, bulk p99 ("no results" when a tenant had none)."""
    if not lat:
        return ["", "", ""]
    a, b = measure(lat.get("alerts"), from_event), measure(lat.get("bulk"), from_event)
    alerts = "no results" if a["p99"] is None else f"{ms(a['p50'])} / {ms(a['p99'])}"
    within = "" if a["within"] is None else f"{a['within']:.1%}"
    bulk = "" if "bulk" not in lat else "no results" if b["p99"] is None else ms(b["p99"])
    return [alerts, within, bulk]


def ran(figures: dict[str, Any], system: str) -> dict[str, Any] | None:
    """A system's record if it ran, else None."""
    r = figures.get(system)
    return r if r and "skipped" not in r and "failed" not in r else None


def flink_modes(r: dict[str, Any]) -> list[str]:
    """PyFlink's Python execution modes measured, the headline first."""
    tp, lat = r.get("throughput") or {}, r.get("latency") or {}
    return list(dict.fromkeys([*tp.get("by_mode", {}), *lat.get("by_mode", {})]))


def targets(figures: dict[str, Any]) -> tuple[float, float]:
    """The alerts' and the bulk's targets in ms, from the first latency run found."""
    for system in SYSTEMS:
        lat = (ran(figures, system) or {}).get("latency") or {}
        if "alerts" in lat and "bulk" in lat:
            return lat["alerts"]["target_ms"], lat["bulk"]["target_ms"]
    return 50.0, 1000.0  # bench.peers.common's


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.peers`: a row per system and variant that ran; then those that did not, and why."""
    alerts_ms, bulk_ms = targets(figures)
    lines = ["| system | throughput per core, in-process | end to end per core | alerts p50 / p99 "
             f"ms | alerts within {alerts_ms:,.0f} ms | bulk p99 ms (target {bulk_ms / 1e3:g} s) |",
             "|---|---|---|---|---|---|"]

    def row(label: str, in_process: str, end_to_end: str, lat: list[str]) -> None:
        lines.append(f"| {label} | {in_process} | {end_to_end} | " + " | ".join(lat) + " |")

    if r := ran(figures, "cameo"):
        tp = r.get("throughput") or {}
        both = [f"{rate(tp['eps_per_core'])} (Ray, 1 executor)"] if "eps_per_core" in tp else []
        if tp.get("x2_eps_per_core"):
            both.append(f"{rate(tp['x2_eps_per_core'])} (2 executors)")
        core = tp.get("in_process_eps_per_core")
        row("cameo (`cameo` policy)", f"{rate(core)} (one executor core)" if core else "",
            ", ".join(both), latency_cells(r.get("latency"), from_event=True))
        if r.get("latency_fifo"):
            row("cameo (`fifo` policy)", "", "", latency_cells(r["latency_fifo"], from_event=True))
    if r := ran(figures, "spark"):
        row(f"Spark {r['version']}, FAIR pools", "", "", latency_cells(r.get("latency")))
    if r := ran(figures, "flink"):
        tp, lat = r.get("throughput") or {}, r.get("latency") or {}
        for mode in flink_modes(r):
            per_p = tp.get("by_mode", {}).get(mode, {})
            row(f"PyFlink {r['version']}, {mode} mode", "",
                ", ".join(f"{rate(f['eps_per_core'])} (p={p})" for p, f in per_p.items()),
                latency_cells(lat.get("by_mode", {}).get(mode)))
    if r := ran(figures, "bytewax"):
        by_p = (r.get("throughput") or {}).get("by_parallelism", {})
        one, two = by_p.get("1"), by_p.get("2")
        row(f"Bytewax {r['version']}", f"{rate(one['eps_per_core'])} (1 worker)" if one else "",
            f"{rate(two['eps_per_core'])} (2 processes)" if two else "", ["", "", ""])
    return [*lines, *size(figures), *not_run(figures)]


def size(figures: dict[str, Any]) -> list[str]:
    """The run's size, from its records: a `--quick` run is smaller than the full one."""
    tps = [r["throughput"] for s in SYSTEMS if (r := ran(figures, s)) and r.get("throughput")]
    lats = [r["latency"] for s in SYSTEMS if (r := ran(figures, s)) and r.get("latency")]
    parts = []
    if tps:
        repeat = tps[0].get("repeat", len(tps[0].get("runs", [])))
        parts.append(f"throughput over {tps[0]['events']:,} events, the median of {repeat} "
                     f"run{'s' if repeat != 1 else ''} per setup")
    if lats:
        lat = lats[0]
        parts.append(f"latency after {lat['warmup_s']:g} s of warm-up, over {lat['seconds']:g} s, "
                     f"bulk offered {lat['offered_eps']['bulk']:,.0f} events/s")
    quick = "--quick" in figures.get("measured_on", {}).get("argv", [])
    return ["", f"{'A `--quick` run' if quick else 'This run'}: " + "; ".join(parts) + "."] if parts else []


def not_run(figures: dict[str, Any]) -> list[str]:
    """A line naming each system that did not run, and why."""
    why = []
    for system in SYSTEMS:
        r = figures.get(system)
        if r is None:
            why.append(f"{NAMES[system]} (not asked for: `--systems`)")
        elif "skipped" in r or "failed" in r:
            reason = r.get("skipped") or f"failed, {r['failed']}"
            why.append(f"{NAMES[system]} ({reason})")
    return ["", "Not in this run: " + "; ".join(why) + "."] if why else []


def findings(figures: dict[str, Any]) -> list[str]:
    """What the table says, computed: throughput against Bytewax and PyFlink, then the alerts'
    p99 and the bulk's target per system, and whether each peer kept up with the bulk input."""
    cameo, spark, flink, bytewax = (ran(figures, s) for s in SYSTEMS)
    out = []
    ctp = (cameo or {}).get("throughput") or {}
    if bytewax and bytewax.get("throughput"):
        btp = bytewax["throughput"]
        same = btp["cameo_same_run"]["executor_core"]["eps_per_core"]
        one = btp["by_parallelism"]["1"]["eps_per_core"]
        line = (f"- **Throughput.** Inside one process, our executor core runs the query "
                f"{ratio(same, one)} as fast as Bytewax's single worker ({rate(same)} against {rate(one)} "
                "events/s, in Bytewax's own run, on the same events and batches).")
        two = btp["by_parallelism"].get("2", {}).get("eps_per_core")
        if ctp.get("eps_per_core") and two:
            line += (f" Between processes, ours (Ray, 1 executor, driver pushing) keeps "
                     f"{rate(ctp['eps_per_core'])} per core, Bytewax with two processes "
                     f"{rate(two)} per core: every event that changes worker crosses a socket "
                     "on its own.")
        out.append(line)
    ftp = (flink or {}).get("throughput") or {}
    flink_rates = [f["eps_per_core"] for per_p in ftp.get("by_mode", {}).values()
                   for f in per_p.values()]
    if flink_rates:
        out.append(f"- PyFlink's Python functions run {rate(min(flink_rates))} to "
                   f"{rate(max(flink_rates))} events/s per core (both modes, parallelism 1 "
                   "and 2): each event crosses from the JVM to Python and back.")
    out += latency_findings(cameo, spark, flink)
    return out


def latency_findings(cameo: dict[str, Any] | None, spark: dict[str, Any] | None,
                     flink: dict[str, Any] | None) -> list[str]:
    """The alerts' p99 per system, and each bulk's p99 against its target and its input."""
    runs: list[tuple[str, dict[str, Any], bool]] = []  # (label, latency record, from event)
    if cameo and cameo.get("latency"):
        runs.append(("cameo", cameo["latency"], True))
        if cameo.get("latency_fifo"):
            runs.append(("cameo under `fifo`", cameo["latency_fifo"], True))
    if spark and spark.get("latency"):
        runs.append(("Spark with FAIR pools", spark["latency"], False))
    for mode, lat in ((flink or {}).get("latency") or {}).get("by_mode", {}).items():
        runs.append((f"PyFlink ({mode} mode)", lat, False))
    if not runs:
        return []
    p99 = [f"{label} {ms(measure(lat.get('alerts'), fe)['p99']) or 'none'}"
           for label, lat, fe in runs]
    bulk = []
    for label, lat, fe in runs:
        b, target = measure(lat.get("bulk"), fe)["p99"], (lat.get("bulk") or {}).get("target_ms")
        if b is not None and target:
            bulk.append(f"{label} {'met' if b <= target else 'missed'}")
    out = ["- **Latency.** Alerts p99 in ms: " + ", ".join(p99) + "."
           + (f" The bulk's p99 against its target: {', '.join(bulk)}." if bulk else "")]
    behind = kept_up(cameo, spark, flink)
    if behind:
        out.append("- What each took of its input: " + "; ".join(behind) + ".")
    return out


def kept_up(cameo: dict[str, Any] | None, spark: dict[str, Any] | None,
            flink: dict[str, Any] | None) -> list[str]:
    """How much of its input each system took (a late bulk p99 comes from falling behind), and
    results a run left out."""
    out = []
    for label, lat in (("cameo", (cameo or {}).get("latency")),
                       ("cameo under `fifo`", (cameo or {}).get("latency_fifo"))):
        b = (lat or {}).get("bulk", {})
        if b.get("throughput_eps") and b.get("offered_eps"):
            out.append(f"{label} ingested {b['throughput_eps'] / b['offered_eps']:.0%} of "
                       f"{b['offered_eps']:,.0f} events/s")
    progress = ((spark or {}).get("latency") or {}).get("spark") or {}  # per query
    if s := progress.get("bulk"):
        batches = [f"{q} {ms(p['mean_batch_ms'])} ms" for q, p in progress.items()
                   if p.get("mean_batch_ms") is not None]
        out.append(f"Spark ingested {s['ingested_eps'] / s['offered_eps']:.0%} of "
                   f"{s['offered_eps']:,.0f} events/s, {s['backlog_at_feed_end_s']} s of input "
                   "behind when the feed ended"
                   + (f" (its micro-batches took, on average: {', '.join(batches)})" if batches else ""))
    if ((spark or {}).get("latency") or {}).get("drained") is False:
        out.append("Spark had not drained both queries within its drain time after the feed: "
                   "results still missing then are not in its latencies")
    for mode, lat in ((flink or {}).get("latency") or {}).get("by_mode", {}).items():
        if lat.get("alerts_at_sink", 0) < lat.get("alerts_sent", 0):
            out.append(f"PyFlink ({mode} mode) had {lat['alerts_at_sink']:,} of "
                       f"{lat['alerts_sent']:,} alerts at its sink by the end")
        ev = lat.get("bulk_events")
        if ev and ev["sent_in_closed_windows"]:
            out.append(f"PyFlink ({mode} mode) counted {ev['counted'] / ev['sent_in_closed_windows']:.0%} "
                       "of the events of the windows it closed by the end")
    return out
