"""Prefect task wrappers: one module per step, each a thin call into `inferopt` plus MLflow logging."""
