"""The ranges a config's numbers must lie in, so that no input is finite yet absurd: a rate of 1e-300 per
second is a timer that never fires, a timeout of 1e300 s a run that never ends, a 2**70 request count a
table that never fits. Annotated types for the recurring quantities (`Seconds`, `RatePerS`, `Seed`,
`Tokens`, `Count`) and `check_number`, which every config model runs on every field (`Frozen` in
`systems.py`): no positive number below `TINY`, none above `MAX_FLOAT`, no integer beyond `MAX_INT`
(non-finite floats are refused by pydantic itself: `allow_inf_nan=False`).

Deliberately not here: cross-field and cross-file checks (the models' validators, `precheck.py`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import Field

MAX_SECONDS = 86_400.0  # one day: the longest any timeout, deadline or replayed load may run
TINY = 1e-9  # below this a positive rate, time or fraction is a typo (or a denormal), never a setting
MAX_FLOAT = 1e18  # above every peak FLOP/s, byte count or price a config names
MAX_INT = 2**53  # integers beyond this lose precision as floats (and overflow int64 arithmetic)
MAX_TOKENS = 1 << 24  # token lengths and vocabularies
MAX_COUNT = 1_000_000  # requests, prompts, resamples

Seconds = Annotated[float, Field(gt=0.0, le=MAX_SECONDS, description="seconds, at most one day")]
RatePerS = Annotated[float, Field(gt=0.0, le=1e6, description="per second")]
Seed = Annotated[int, Field(ge=0, le=MAX_INT, description="a seed (numpy needs it non-negative)")]
Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS)]
Count = Annotated[int, Field(gt=0, le=MAX_COUNT)]


def _problem(value: Any) -> str | None:
    """What is wrong with one number, with the fix; None when it is in range."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not finite; fix: use a finite number"
    if isinstance(value, int) and abs(value) > MAX_INT:
        return f"{value} is beyond {MAX_INT:.3g}; fix: use a smaller whole number"
    if isinstance(value, float) and value != 0.0 and abs(value) < TINY:
        return f"{value!r} is tiny (below {TINY:g}): as a rate or a time it never fires; fix: use 0 or >= {TINY:g}"
    if isinstance(value, float) and abs(value) > MAX_FLOAT:
        return f"{value!r} is beyond {MAX_FLOAT:g}; fix: use a value <= {MAX_FLOAT:g}"
    return None


def check_number(value: Any) -> Any:
    """`value` unchanged when every number in it (a scalar, or inside a mapping or list) is in range;
    else ValueError naming the number and the fix."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        if isinstance(item, (dict, list, tuple)):
            check_number(item)
        elif (why := _problem(item)) is not None:
            raise ValueError(f"[{key!r}]: {why}")
    if (why := _problem(value)) is not None:
        raise ValueError(why)
    return value
