"""The columns of a workload table, in canonical order: what `build.py` makes and `trace.py` reads a trace into.

Deliberately not here: making or reading tables (`build.py`, `trace.py`).
"""

WORKLOAD_COLUMNS = (
    "request_id",
    "arrival_offset_s",
    "input_len",
    "output_len",
    "prefix_group",
    "prefix_len",
    "tenant",
    "priority",
)
