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

# a session workload's extra columns (`sessions.py`): one row per turn, its session and the plan after the turn
SESSION_COLUMNS = ("session_id", "turn", "session_turns", "think_ms", "tool_sleep_ms", "tool_result_tokens")
