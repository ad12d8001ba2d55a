"""Shared pytest setup. OMP_WAIT_POLICY=PASSIVE must be set before torch loads: busy-waiting OpenMP threads
were ≈10× slower on the loaded 2-core CI box (see /work/shared/FINDINGS.md)."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
