"""The docs' benchmark tables are written from the committed JSON, and a table that
differs from its JSON, a table typed in and a figure that names no JSON are caught."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import report
from bench.harness.output import save_json
from bench.tables import throughput


def test_every_table_in_the_docs_equals_its_committed_json() -> None:
    tables = [m["name"] for doc in report.DOCS
              for m in report.BLOCK.finditer((Path(report.REPO) / doc).read_text())]
    benchmarks = {name.partition(".")[0] for name in tables}
    assert {"throughput", "nexmark", "sched_overhead", "service", "migration", "scaling",
            "recovery", "critical_path", "spark", "demo"} <= benchmarks
    assert report.main(["--check"]) == 0


def test_a_table_typed_in_must_say_why_and_a_missing_json_is_named() -> None:
    table = "| mode | p99 ms |\n|---|---|\n| cameo | 12 |\n"
    assert report.typed_tables(f"text\n\n{table}\nmore\n") == ["| mode | p99 ms |"]
    assert report.typed_tables(f"text\n{report.TYPED}a run whose JSON was lost -->\n{table}") == []
    block = "<!-- table throughput bench/results/none.json: python -m bench.report -->\n"
    generated = f"text\n{block}{table}<!-- end table -->\n"
    assert report.typed_tables(generated) == []
    missing: list[str] = []
    assert report.rewrite(generated, missing) == (generated, [])  # left as it was
    assert missing == ["throughput (bench/results/none.json)"]


def test_a_table_typed_in_is_found_and_written_from_its_json(tmp_path: Path) -> None:
    figures = {arm: {"events_per_s": 1000.0 * (i + 1)} for i, arm in enumerate(
        ["operators", "executor_core", "executor_core_arrow", "ray_x1", "ray_x1_arrow", "ray_x2",
         "ray_x2_arrow", "ray_x1_busy", "ray_x1_arrow_busy", "ray_x2_busy", "ray_x2_arrow_busy"])}
    figures["ray_x1"]["events_per_cpu_s"] = 2_000.0
    figures["ray_x1_arrow"]["events_per_cpu_s"] = 10_000.0
    path = tmp_path / "throughput.json"
    save_json(str(path), figures)
    head = f"<!-- table throughput {path}: python -m bench.report -->\n"
    text = f"before\n{head}| typed | 9 K |\n<!-- end table -->\nafter\n"
    new, changed = report.rewrite(text)
    assert changed == [f"throughput ({path})"]
    assert new.startswith(f"before\n{head}") and new.endswith("<!-- end table -->\nafter\n")
    assert "| Ray, 1 executor, end to end (parallelism 1) | 4 K | 5 K | 1.2x |" in new
    # Per CPU second of every process, and the CPU each event cost: the scale-out table.
    assert "| 1 executor | 2 K | 500.0 | 1.0x | 10 K | 100.0 | 1.0x |  |" in \
        throughput.scale_out(figures)
    commit = json.loads(path.read_text())["measured_on"]["commit"]
    assert f"commit `{commit[:10]}`" in new
    assert report.rewrite(new) == (new, [])  # written: nothing left to change


def test_a_figure_in_a_section_that_names_no_json_is_found() -> None:
    claim = "Pushes reach 400,000 events/s with msgpack, 2.9x JSON.\n"
    assert report.unbacked_figures(f"# Pushes\n\n{claim}") == [
        "line 3: Pushes reach 400,000 events/s with msgpack, 2.9x JSON."]
    # Backed: the section names a JSON of bench/results/ that exists, or says why it is typed.
    assert report.unbacked_figures(f"# Pushes\n{claim}From `bench/results/service.json`.\n") == []
    assert report.unbacked_figures(f"# Pushes\n{claim}From `bench/results/gone.json`.\n") != []
    assert report.unbacked_figures(f"# Pushes\n{report.TYPED}a lost run -->\n{claim}") == []
    # The section ends at the next heading; code blocks (examples of output) are not claims.
    assert report.unbacked_figures(
        f"# A\nFrom `bench/results/service.json`.\n# B\n{claim}") == [f"line 4: {claim.strip()}"]
    assert report.unbacked_figures("# Output\n```\nin 12,059.0 ev/s\n```\n") == []


def test_the_demo_table_puts_each_arm_beside_the_others() -> None:
    from bench.tables.demo import table
    from spark_ingest.demo import GOALS

    def run(arm: str, p50_ms: float) -> dict[str, Any]:
        e2e = {"n": 9, "p50_ms": p50_ms, "p99_ms": 3000.0}
        return {"arm": arm, "cores": {}, "micro_batches": {}, "dataflows": {"alerts": {
            "within_target": 1.0, "results": 9, "stages": {"end_to_end": e2e}}}}

    lines = table({"goals": GOALS, "baseline": "abc", "runs": [
        run("baseline", 2500.0), run("this tree", 1500.0), run("baseline", 2400.0)]})
    assert lines[0] == ("| the alerts (target 50 ms) | baseline `abc`, run 1 | this tree, run 1 "
                        "| baseline `abc`, run 2 |")
    assert lines[-1].endswith("met in 0 of 2 runs (baseline); 1 of 1 runs (this tree).")
