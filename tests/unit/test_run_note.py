"""The flow's parent run describes itself: MLflow's note holds the decision, a link to the report and every
reason (indented reasons nested), and a verdict too long for a tag is cut with a pointer to verdict.json."""

from __future__ import annotations

from tasks.report import NOTE_MAX_CHARS, run_note

HREF = "#/experiments/1/runs/abc/artifacts/report.html"


def test_the_note_holds_the_decision_the_link_and_every_reason() -> None:
    verdict = {
        "decision": "reject",
        "reasons": ["REJECT because: burst misses the SLO", "validate[burst]: FAIL", "  TTFT p99 228 ms > 200 ms"],
        "warnings": ["the fake engine is a test double"],
    }
    note = run_note(verdict, HREF)
    assert note.splitlines()[0] == f"**VERDICT: REJECT** — [open the report]({HREF})"
    assert "- validate[burst]: FAIL\n  - TTFT p99 228 ms > 200 ms\n" in note
    assert note.rstrip().endswith("- WARNING: the fake engine is a test double")


def test_a_long_verdict_is_cut_and_says_where_the_rest_is() -> None:
    note = run_note({"decision": "accept", "reasons": [f"reason {i} " + "x" * 80 for i in range(200)]}, HREF)
    assert len(note) <= NOTE_MAX_CHARS and note.endswith("(cut: every reason is in `verdict.json`)")
    assert "reason 0 " in note and "reason 199" not in note


def test_a_run_without_a_verdict_says_so() -> None:
    note = run_note(None, HREF)
    assert note.startswith("**No verdict**") and HREF in note
