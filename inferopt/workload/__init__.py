"""Workloads: arrivals x joint lengths x prefix groups x tenants, seeded and hashed (see build.py)."""

from inferopt.workload.build import build_workload, prompt_token_ids, workload_hash
from inferopt.workload.columns import WORKLOAD_COLUMNS

__all__ = ["WORKLOAD_COLUMNS", "build_workload", "prompt_token_ids", "workload_hash"]
