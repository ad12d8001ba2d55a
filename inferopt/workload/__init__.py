"""Workloads: arrivals x joint lengths x prefix groups x tenants, seeded and hashed (see build.py)."""

from inferopt.workload.build import WORKLOAD_COLUMNS, build_workload, prompt_token_ids, workload_hash

__all__ = ["WORKLOAD_COLUMNS", "build_workload", "prompt_token_ids", "workload_hash"]
