"""The verdict: `judge(...)` -> `VerdictResult` (`step.py`: evidence, the cheat lint, `decide`); `decide`'s rules
in `decide.py`, the benchmark-cheat lint (SPEC V4) in `lint/`."""

from inferopt.verdict.decide import Decision, Verdict, decide
from inferopt.verdict.step import VerdictResult, judge

__all__ = ["Decision", "Verdict", "VerdictResult", "decide", "judge"]
