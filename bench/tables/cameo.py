"""`bench.cameo`'s tables: the scenarios by mode, the overload mix by level, and what
each says against its goal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.tables import ms

MODES = ("fifo", "cameo", "floor", "isolated")
#: The Cameo paper's fifo / cameo on the p99, per scenario: the bar each is held to.
PAPER = {"single": (2.7, 2.7), "multi": (4.6, 4.6), "spike": (21.0, 30.0)}
#: The floors may cost the latency-sensitive p99 this much over deadline order alone.
FLOOR_GOAL = 1.2
#: Overload: every tenant's share of its fair share under the floors, and the
#: latency-sensitive tenants' share of results within target.
FAIR_GOAL, WITHIN_GOAL = 0.8, 0.99


def num(v: float) -> str:
    """A ratio's number: 1.35, or 87 from 10 on."""
    return f"{v:.2f}" if v < 10 else f"{v:.0f}"


def times(v: float | None) -> str:
    """A ratio as 1.35x or 87x ("" when there is none)."""
    return "" if v is None else num(v) + "x"


def span(values: list[float]) -> str:
    """The lowest and highest of shares, as 98.1-99.5% (one figure when they are equal)."""
    lo, hi = pct(min(values)), pct(max(values))
    return lo if lo == hi else f"{lo.removesuffix('%')}-{hi}"


def pct(v: float | None) -> str:
    """A share within target: 99.8% (one decimal: the goals are near 100%)."""
    return "" if v is None else f"{v:.1%}"


def sensitive(res: dict[str, Any]) -> list[str]:
    """The latency-sensitive dataflows of a scenario (those its ratios are over)."""
    return [n for n, d in res["cameo"]["dataflows"].items() if d.get("latency_sensitive")]


def modes(res: dict[str, Any]) -> list[str]:
    """The modes a scenario ran (fair: fifo and its "cameo" slot)."""
    return [m for m in MODES if m in res]


def reached(res: dict[str, Any], mode: str) -> float:
    """The load a mode's run reached: its executors' busy share over theirs flat out."""
    return float(res[mode]["utilization"] / res["flat_out_busy"])


def refusals(res: dict[str, Any], label: str = "") -> list[str]:
    """Why the load check refused a ratio, a bullet per run refused (none: [])."""
    if res.get("load_refused"):
        return [f"- {label}: {res['load_refused']}"]
    return [f"- {label}, run {i}: {r}"
            for i, r in enumerate(res.get("load_refused_runs") or [], 1) if r]


def ratio_cell(res: dict[str, Any], key: str) -> str:
    """A ratio, its spread over the runs when there were several, or why there is none."""
    v = res["ratios"].get(key)
    if v is None:
        return "refused: load" if refusals(res) else ""
    lo_hi = (res.get("ratios_spread") or {}).get(key)
    spread = f" ({num(lo_hi[0])}-{num(lo_hi[1])})" if res.get("runs", 1) > 1 and lo_hi else ""
    return times(v) + spread


def row(scenario: str, measure: str, cells: dict[str, str], *tail: str) -> str:
    """A line of `table`: a cell per mode, then the two ratios and the paper's bar."""
    return (f"| {scenario} | {measure} | " + " | ".join(cells.get(m, "") for m in MODES)
            + " | " + " | ".join([*tail, "", "", ""][:3]) + " |")


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.cameo`: per scenario, the latency-sensitive dataflows' p50, p99 and share
    within target, bulk's events/s and the load each mode reached, then fair's shares of
    executor time; the ratios on the p99, beside the paper's bar. A refused ratio's reason
    follows the table."""
    lines = ["| scenario | measure | fifo | cameo | floor (default) | isolated | fifo / cameo | "
             "floor / cameo | paper's bar |", "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for name in ("single", "multi", "spike"):
        res = figures.get(name)
        if not res:
            continue
        dfs = {m: res[m]["dataflows"] for m in modes(res)}
        for n in sensitive(res):
            target = res["cameo"]["dataflows"][n]["target_ms"]
            lines.append(row(name, f"{n} p50 ms", {m: ms(d[n].get("p50_ms")) for m, d in dfs.items()}))
            lo, hi = PAPER[name]
            lines.append(row(name, f"{n} p99 ms", {m: ms(d[n].get("p99_ms")) for m, d in dfs.items()},
                             ratio_cell(res, "fifo_over_cameo_p99"),
                             ratio_cell(res, "floor_over_cameo_p99"),
                             f"{lo:g}x" if lo == hi else f"{lo:g}-{hi:g}x"))
            lines.append(row(name, f"{n} within {target:,.0f} ms",
                             {m: pct(d[n].get("within_target")) for m, d in dfs.items()}))
        if all("bulk" in d and not d["bulk"].get("latency_sensitive") for d in dfs.values()):
            lines.append(row(name, "bulk events/s in",
                             {m: f"{d['bulk']['throughput_eps']:,.0f}" for m, d in dfs.items()}))
        lines.append(row(name, f"load reached (stated {res['stated_load']:.0%})", load_cells(res)))
        notes += refusals(res, name)
    fair = figures.get("fair")
    if fair:
        def shares(mode: str, field: str = "final_shares") -> str:
            return " / ".join(f"{s:.0%}".removesuffix("%") for s in fair[mode][field].values()) + "%"
        tenants = " / ".join(n.removeprefix("bulk-") for n in fair["cameo"]["final_shares"])
        lines.append(row("fair", f"executor time {tenants}",
                         {"fifo": shares("fifo"), "cameo": shares("cameo") + " (fair_share)"},
                         "", "", "weights " + shares("cameo", "weight_shares")))
        lines.append(row("fair", f"load reached (offered {fair['stated_load']:.0%})",
                         load_cells(fair)))
        notes += refusals(fair, "fair")
    if notes:
        lines += ["", "The load check refused a ratio:", *notes]
    return lines


def load_cells(res: dict[str, Any]) -> dict[str, str]:
    """Per mode, the load reached and the executors' busy share."""
    return {m: f"{reached(res, m):.0%} ({res[m]['utilization']:.0%} busy)" for m in modes(res)}


def findings(figures: dict[str, Any]) -> list[str]:
    """The scenarios against their goals, in words, from the same figures as `table`."""
    out = []
    for name in ("single", "multi", "spike"):
        res = figures.get(name)
        if not res:
            continue
        fifo, floor = res["ratios"].get("fifo_over_cameo_p99"), res["ratios"].get("floor_over_cameo_p99")
        if fifo is None:
            out.append(f"- **{name}**: no ratio; the load check refused it (above).")
            continue
        lo, hi = PAPER[name]
        bar = f"{lo:g}x" if lo == hi else f"{lo:g}-{hi:g}x"
        verdict = ("beats" if fifo > hi else "is short of" if fifo < lo else "is within")
        out.append(f"- **{name}**: fifo / cameo {times(fifo)} {verdict} the paper's {bar}; "
                   f"floor / cameo {times(floor)} (goal: within {FLOOR_GOAL:g}x, "
                   f"{'met' if floor <= FLOOR_GOAL else 'not met'}).")
    for name in ("multi", "spike"):
        res = figures.get(name)
        if not res or "isolated" not in res:
            continue
        n = sensitive(res)[0]
        iso, cam = res["isolated"]["dataflows"], res["cameo"]["dataflows"]
        out.append(f"- **{name}, isolated**: {n} p99 {ms(iso[n].get('p99_ms'))} ms against "
                   f"{ms(cam[n].get('p99_ms'))} under cameo; its bulk, on one executor, took in "
                   f"{iso['bulk']['throughput_eps']:,.0f} events/s against "
                   f"{cam['bulk']['throughput_eps']:,.0f} shared, {pct(iso['bulk'].get('within_target'))} "
                   f"within target against {pct(cam['bulk'].get('within_target'))}.")
    fair = figures.get("fair")
    if fair:
        def shares(mode: str, field: str = "final_shares") -> str:
            return " / ".join(f"{s:.0%}" for s in fair[mode][field].values())
        out.append(f"- **fair**: under `fair_share` the executor time went {shares('cameo')}, "
                   f"against weights of {shares('cameo', 'weight_shares')}; under `fifo` "
                   f"{shares('fifo')}.")
    return out


def overload(figures: dict[str, Any]) -> list[str]:
    """`bench.cameo --scenario overload`: per level offered and mode, the latency-sensitive
    tenants' share within target and p99, the bulk tenants' events/s and share of their fair
    share, the lowest share of fair of any tenant, and the load reached."""
    ov = figures["overload"]
    alerts, bulks = list(ov["overload"]["sensitive"]), list(ov["overload"]["bulk"])
    targets = " / ".join(f"{t:g}" for t in ov["overload"]["sensitive"].values())
    runs = " (any run)" if ov.get("runs", 1) > 1 else ""
    lines = [f"| offered | mode | alerts {targets} ms within target | their p99 ms | "
             + " | ".join(f"{b} ev/s, share of fair" for b in bulks)
             + f" | lowest share of fair{runs} | load reached (executors busy) |",
             "|---|---|---|---|" + "---|" * len(bulks) + "---|---|"]
    notes = []
    for level, res in ov["levels"].items():
        for m in ("fifo", "cameo", "floor"):
            dfs = res[m]["dataflows"]
            bulk = [f"{dfs[b]['throughput_eps']:,.0f}, {pct0(dfs[b].get('share_of_fair'))}"
                    for b in bulks]
            lines.append(f"| {float(level):.0%} | {m} | "
                         + " / ".join(pct(dfs[a].get("within_target")) for a in alerts) + " | "
                         + " / ".join(ms(dfs[a].get("p99_ms")) for a in alerts) + " | "
                         + " | ".join(bulk) + f" | {pct0(res[m].get('min_share_of_fair'))} | "
                         f"{reached(res, m):.0%} ({res[m]['utilization']:.0%}) |")
        notes += refusals(res, f"{float(level):.0%}")
    if notes:
        lines += ["", "Levels a mode did not reach (the load check):", *notes]
    return lines


def pct0(v: float | None) -> str:
    """A share of fair: 99%."""
    return "" if v is None else f"{v:.0%}"


def overload_findings(figures: dict[str, Any]) -> list[str]:
    """The overload mix against its goals: the floors' shares of fair, their weights, and the
    latency-sensitive tenants within target; deadline order alone and fifo beside them; what
    the bulk tenants took in of what they were offered; the levels off their load."""
    ov = figures["overload"]
    levels, alerts = ov["levels"], list(ov["overload"]["sensitive"])
    (light, _), (heavy, weight) = ((b, v["weight"]) for b, v in ov["overload"]["bulk"].items())

    def lowest(mode: str) -> float:
        return float(min(r[mode]["min_share_of_fair"] for r in levels.values()))

    def within(mode: str) -> list[float]:
        return [w for r in levels.values() for a in alerts
                if (w := r[mode]["dataflows"][a].get("within_target")) is not None]

    def at_levels(cell: Callable[[dict[str, Any]], str]) -> str:
        return " / ".join(cell(r) for r in levels.values())

    def bulk_in(r: dict[str, Any], mode: str, field: str = "throughput_eps") -> float:
        return sum(r[mode]["dataflows"][b][field] for b in (light, heavy))

    def met(ok: bool) -> str:
        return "met" if ok else "not met"

    each = " / ".join(f"{float(lvl):.0%}" for lvl in levels)
    floor_shares = at_levels(lambda r: times(
        r["floor"]["dataflows"][heavy]["share"] / r["floor"]["dataflows"][light]["share"]))
    out = [f"- **floor**: every tenant got at least {lowest('floor'):.0%} of its fair share at "
           f"every level (goal: {FAIR_GOAL:.0%}, {met(lowest('floor') >= FAIR_GOAL)}); {heavy} "
           f"(weight {weight:g}) got {floor_shares} {light}'s executor time at {each}. The "
           f"latency-sensitive tenants were {span(within('floor'))} within target (goal: "
           f"{WITHIN_GOAL:.0%} for each, {met(min(within('floor')) >= WITHIN_GOAL)}).",
           f"- **cameo** (deadline order alone): {heavy}, whose deadlines come last, got "
           + at_levels(lambda r: pct0(r["cameo"]["dataflows"][heavy]["share_of_fair"]))
           + f" of its fair share at {each}; the latency-sensitive tenants were "
           f"{span(within('cameo'))} within target.",
           f"- **fifo**: the latency-sensitive tenants were {span(within('fifo'))} within "
           f"target; the lowest share of fair was {lowest('fifo'):.0%}.",
           "- **Taken in**: the bulk tenants were offered together "
           + at_levels(lambda r: f"{bulk_in(r, 'floor', 'offered_eps'):,.0f}")
           + f" events/s at {each}, and took in "
           + "; ".join(f"{at_levels(lambda r, m=m: f'{bulk_in(r, m):,.0f}')} under {m}"
                       for m in ("fifo", "cameo", "floor")) + "."]
    off = [f"{float(lvl):.0%}" for lvl, r in levels.items() if refusals(r)]
    if off:
        out.append(f"- **Load**: at {', '.join(off)} the executors of a mode or more did not "
                   "reach the load the level states (the table's last column, the reasons "
                   "under it): their figures are not the mix at the level offered.")
    return out


#: A mix's goals: every tenant this share of its results within target, and at least this
#: share of its weighted fair share of executor time.
MIX_WITHIN_GOAL, MIX_FAIR_GOAL = 0.99, 0.8
MIX_MODES = ("fifo", "cameo", "floor", "floor_yield", "floor_even")
MIX_LABELS = {"fifo": "fifo", "cameo": "cameo", "floor": "floor (default)",
              "floor_yield": "floor, late work yields (the rule before)",
              "floor_even": "floor, placed evenly (the placement before)"}


def mix_rows(res: dict[str, Any]) -> list[str]:
    """One mix's table: per mode, each tenant's share within target (and p99), the bulk
    taken in against what was offered, the worst tenant, and the cores every process kept
    busy."""
    tenants = res["mix"]["tenants"]
    offered = " / ".join(f"{m['bulk_offered_eps']:,.0f}" for m in res.get("mix_runs", [res["mix"]]))
    runs = " (any run)" if res.get("runs", 1) > 1 else ""
    lines = ["| mode | " + " | ".join(f"{t['name']} ({t['target_ms']:,.0f} ms)" for t in tenants)
             + f" | bulk ev/s in (offered) | worst within target{runs} | lowest share of fair{runs} "
             "| cores: driver / executors / all |",
             "|---|" + "---|" * len(tenants) + "---|---|---|---|"]
    for m in (m for m in MIX_MODES if m in res):
        dfs = res[m]["dataflows"]
        bulk_in = sum(dfs[t["name"]]["throughput_eps"] for t in tenants if t["kind"] == "bulk")
        roles, wall = res[m]["cpu"]["cpu_s_by_role"], res[m]["cpu"]["wall_s"]
        lines.append(f"| {MIX_LABELS[m]} | " + " | ".join(
            f"{pct(dfs[t['name']].get('within_target'))} ({ms(dfs[t['name']].get('p99_ms'))})"
            for t in tenants) + f" | {bulk_in:,.0f} ({offered}) | "
            f"{pct(res[m]['worst_within_target'])} | {pct0(res[m]['min_share_of_fair'])} | "
            f"{roles['driver'] / wall:.2f} / {roles['executors'] / wall:.2f} / "
            f"{res[m]['cpu']['cores_busy']:.2f} |")
    return lines


def capacity_line(res: dict[str, Any]) -> str:
    """How the mix's capacity was found, and what it was."""
    cap, mix = res["mix"]["capacity"], res["mix"]
    probes = ", ".join(f"{p['offered_eps']:,.0f} -> {p['taken_eps']:,.0f} "
                       f"({p['p99_over_target']:.1f}x)" for p in cap["probes"])
    return (f"Capacity: bulk alone took in {mix['bulk_alone_eps']:,.0f} events/s flat out; beside "
            f"the mix's other tenants the default kept up with {cap['eps']:,.0f} "
            f"({cap['share_of_bulk_alone']:.0%} of it; probes, offered -> taken in (bulk p99 / "
            f"target): {probes}), and the mix's bulk was offered {mix['load']:.0%} of that.")


def mix(figures: dict[str, Any]) -> list[str]:
    """`bench.cameo --scenario mix`: the issue's mix per mode, and its capacity."""
    res = figures["mix"]
    return [*mix_rows(res), "", capacity_line(res)]


def mix_findings(figures: dict[str, Any]) -> list[str]:
    """The mix against its goals, and the late rule against the one before, in words."""
    res = figures["mix"]
    floor, before = res["floor"], res.get("floor_yield")
    out = [f"- **floor** (the default): the worst tenant was {pct(floor['worst_within_target'])} "
           f"within target (goal: {MIX_WITHIN_GOAL:.0%} for each, "
           f"{'met' if floor['worst_within_target'] >= MIX_WITHIN_GOAL else 'not met'}); the "
           f"lowest share of fair {pct0(floor['min_share_of_fair'])} (goal: {MIX_FAIR_GOAL:.0%}, "
           f"{'met' if floor['min_share_of_fair'] >= MIX_FAIR_GOAL else 'not met'})."]
    worst, d = min(floor["dataflows"].items(), key=lambda kv: kv[1].get("within_target", 0.0))
    if d.get("within_target", 0.0) < MIX_WITHIN_GOAL and d.get("late_words"):
        out.append(f"- **What held {worst}** (its late results' critical path, `cameo explain`, "
                   f"{d['late_paths']:,} late): " + " ".join(w.rstrip(".") + "." for w in d["late_words"]))
    if before:
        bulk = [t["name"] for t in res["mix"]["tenants"] if t["kind"] == "bulk"]

        def each(mode: dict[str, Any]) -> str:
            return ", ".join(f"{n} p99 {ms(mode['dataflows'][n].get('p99_ms'))} ms, "
                             f"{pct(mode['dataflows'][n].get('within_target'))} within target" for n in bulk)
        out.append(f"- **The late rule**, in the same run: under the floors {each(floor)}; with late "
                   f"work yielding to all work due within one target (the rule before) {each(before)}.")
    even = res.get("floor_even")
    if even:
        sensitive = [t["name"] for t in res["mix"]["tenants"] if t["kind"] != "bulk"]

        def within(mode: dict[str, Any]) -> str:
            return ", ".join(f"{n} {pct(mode['dataflows'][n].get('within_target'))}"
                             for n in sensitive)
        out.append(f"- **The placement**, in the same run: tight targets apart (the default) "
                   f"{within(floor)} within target; each dataflow on the least loaded executor "
                   f"(the placement before) {within(even)}.")
    cam = res["cameo"]
    out.append(f"- **cameo** (deadline order alone): worst tenant {pct(cam['worst_within_target'])} "
               f"within target, lowest share of fair {pct0(cam['min_share_of_fair'])}; **fifo**: "
               f"{pct(res['fifo']['worst_within_target'])} and {pct0(res['fifo']['min_share_of_fair'])}.")
    return out


def random_mixes(figures: dict[str, Any]) -> list[str]:
    """`bench.cameo --scenario random`: per mix drawn, its tenants and load, and per mode the
    worst tenant's share within target and share of fair; the worst over the mixes last."""
    rnd = figures["random"]
    modes_run = [m for m in MIX_MODES if m in rnd["worst"]]
    lines = ["| seed | tenants (target, weight) | load | "
             + " | ".join(f"{MIX_LABELS[m]}: worst within target, lowest share of fair" for m in modes_run)
             + " |", "|---|---|---|" + "---|" * len(modes_run)]
    for seed, res in rnd["mixes"].items():
        tenants = ", ".join(f"{t['name'].rsplit('-', 1)[0]} ({t['target_ms']:,.0f} ms, w {t['weight']:g})"
                            for t in res["mix"]["tenants"])
        lines.append(f"| {seed} | {tenants} | {res['mix']['load']:.0%} | " + " | ".join(
            f"{pct(res[m]['worst_within_target'])}, {pct0(res[m]['min_share_of_fair'])}"
            for m in modes_run) + " |")
    lines.append("| all | the worst of any mix | | " + " | ".join(
        f"{pct(rnd['worst'][m]['worst_within_target'])}, {pct0(rnd['worst'][m]['min_share_of_fair'])}"
        for m in modes_run) + " |")
    return lines


SKEW_MODES = ("fifo", "cameo", "floor")


def skew(figures: dict[str, Any]) -> list[str]:
    """`bench.cameo --scenario skew`: per level offered and shape of the input (event times
    together, or the sources apart), per mode the window's p99, p50, share within target
    and the executors' busy share; the ratios on the p99."""
    res = figures["skew"]
    shape = res["skew"]
    labels = {"in_order": "in order", "skewed": f"{shape['skew_ms']:,.0f} ms apart"}
    each = " / ".join(SKEW_MODES)
    first = next(iter(res["levels"].values()))["shapes"]["skewed"]
    target = first["cameo"]["dataflows"][sensitive(first)[0]]["target_ms"]
    lines = [f"| offered | sources | p99 ms: {each} | fifo / cameo | floor / cameo | p50 ms: {each} "
             f"| within target: {each} | executors busy: {each} |", "|---|---|---|---|---|---|---|---|"]
    for level, by_shape in res["levels"].items():
        for key, label in labels.items():
            r = by_shape["shapes"][key]
            n = sensitive(r)[0]
            dfs = [r[m]["dataflows"][n] for m in SKEW_MODES]
            lines.append(
                f"| {float(level) * shape['bulk_alone_eps']:,.0f} ({float(level):.0%}) | {label} | "
                + " / ".join(ms(d.get("p99_ms")) for d in dfs) + " | "
                + ratio_cell(r, "fifo_over_cameo_p99") + " | " + ratio_cell(r, "floor_over_cameo_p99")
                + " | " + " / ".join(ms(d.get("p50_ms")) for d in dfs) + " | "
                + " / ".join(pct(d.get("within_target")) for d in dfs) + " | "
                + " / ".join(f"{r[m]['utilization']:.0%}" for m in SKEW_MODES) + " |")
    runs = res.get("runs", 1)
    return [*lines, "", f"A keyed {shape['window_ms']:,} ms window (target "
            f"{target:,.0f} ms) fed by {shape['sources']} sources merged, offered "
            f"events/s as shares of what bulk alone takes in flat out "
            f"({shape['bulk_alone_eps']:,.0f}); the paper's bar for fifo / cameo is "
            f"{PAPER['single'][0]:g}x" + (f"; medians of {runs} runs, the ratios' spread in "
            "brackets" if runs > 1 else "") + "."]
