"""Step 3, choose: `choose(cause, changes)` -> `Choice` (`remedies.py`)."""

from inferopt.choose.remedies import Choice, choose

__all__ = ["Choice", "choose"]
