"""`bench.admission`'s table: admission's forecast of the bulk rate the issue's mix keeps
up with, priced three ways (the pool's model and the two before it), beside the rate
measured."""

from __future__ import annotations

from typing import Any

MODELS = {"cpu_calls": "CPU per event and calls' CPU per second, the hosts' cores (the pool's)",
          "cpu": "CPU per event, calls' included, the hosts' cores (before)",
          "busy": "busy time per event, 1,000 ms/s per executor (before that)"}


def table(figures: dict[str, Any]) -> list[str]:
    """Per round and model: the pool's capacity and load when asked, the forecast bulk
    rates (at risk, misses) and their ratio to the rate the mix was measured to keep up with."""
    lines = ["| round | bulk alone ev/s | mix keeps up with | priced at | capacity ms/s | "
             "load at the base | at risk past | misses past | misses past / kept up |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(figures["rounds"], 1):
        kept = r["sustainable"]["eps"]
        for model, words in MODELS.items():
            if model not in r:  # a model added after these figures
                continue
            a = r[model]
            fits = a["fits_eps"]
            lines.append(f"| {i} | {r['bulk_alone_eps']:,.0f} | {kept:,.0f} | {words} | "
                         f"{a['capacity_ms_per_s']:,.0f} | {a['utilization']:.0%} | "
                         f"{a['at_risk_eps']:,.0f} | {'' if fits is None else f'{fits:,.0f}'} | "
                         f"{'' if fits is None else f'{fits / kept:.2f}x'} |")
    lines += ["", f"Asked with the mix's bulk at {figures['base']:.0%} of what bulk alone takes "
              "in; rates are the mix's bulk events/s."]
    return lines
