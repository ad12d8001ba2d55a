"""Import a GuideLLM benchmarks JSON or an AIPerf profile_export.jsonl into our per-request tables:

python -m inferopt.interop FILE [-o DIR]

Writes DIR/requests.parquet (our requests table), DIR/phases.parquet (the per-request phases every step reads)
and DIR/benchmark_report-<trial>.json (a Benchmark Report v0.2 per trial); prints one line per trial.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferopt.interop.benchmark_report import trial_reports
from inferopt.interop.peer_files import read_peer_file
from inferopt.measure.phases import phase_table
from inferopt.records import records_to_frame


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GuideLLM / AIPerf per-request results -> our tables.")
    parser.add_argument("file", help="GuideLLM benchmarks JSON or AIPerf profile_export.jsonl")
    parser.add_argument("-o", "--out", default=None, help="output directory (default: FILE's stem beside it)")
    args = parser.parse_args(argv)
    src = Path(args.file)
    try:
        records = read_peer_file(src)
    except (OSError, ValueError) as exc:
        print(f"cannot import {src}: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else src.with_suffix("")
    out.mkdir(parents=True, exist_ok=True)
    records_to_frame(records).to_parquet(out / "requests.parquet", index=False)
    phases = phase_table(records)
    phases.to_parquet(out / "phases.parquet", index=False)
    tool = records[0].arm
    for (arm, scenario, trial), report in trial_reports(records, experiment=src.stem, tool=tool).items():
        (out / f"benchmark_report-{scenario}-{trial}.json").write_text(report.get_json_str())
        ok = phases[(phases["arm"] == arm) & (phases["scenario"] == scenario) & (phases["trial"] == trial)]
        good = ok[ok["outcome"] == "ok"]
        print(
            f"{tool} {scenario} trial {trial}: {len(ok)} requests, {len(good)} ok, "
            f"TTFT p50 {good['ttft_ms'].median():.2f} ms, E2E p99 {good['e2e_ms'].quantile(0.99):.2f} ms"
        )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
