"""Our trials in other tools' formats and theirs in ours: `benchmark_report.py` writes a trial as an llm-d
Benchmark Report v0.2 (the `llmd-benchmark-report` package's schema and validator); `peer_files.py` reads
GuideLLM's and AIPerf's per-request result files into our request records (`python -m inferopt.interop FILE`
writes them as our requests/phases tables plus a Benchmark Report per trial).

Deliberately not here: MLflow (tasks/tracking.py logs each step's reports) and running the peers.
"""
