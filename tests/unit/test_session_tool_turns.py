"""Sessions' tool-call turns: the model is asked for the call in the suite's format, its answer parsed and scored into
the records, the tool service called with its arguments where valid, and the scores in the gate's own slices (fake
engine: not applicable; a scripted text engine: real scores that can pass and fail)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from inferopt.config import (
    BatchingKnobs,
    DelayConfig,
    FakeSystem,
    GateSettings,
    HFSystem,
    ModelSpec,
    PoissonArrivals,
    SessionsConfig,
    ToolConfig,
    TurnsConfig,
    WorkloadConfig,
)
from inferopt.engines.base import TokenEvent
from inferopt.engines.fake import FakeEngine
from inferopt.gate.session_tools import fold_session_tools, session_tool_gate, turn_samples
from inferopt.gate.sliced import overall_status
from inferopt.gate.suite_gate import SuiteGate
from inferopt.gate.tasks.utils import process_gen
from inferopt.measure.agentic import run_sessions
from inferopt.measure.history import SQLiteHistory
from inferopt.measure.phases import phase_table
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.measure.tool_turns import ToolTurns, tool_turns_for
from inferopt.model.codec import codec_for
from inferopt.model.quality.corpus import _holdout
from inferopt.model.quality.toolcall import TOOL_ANSWER_TOKENS, score_tool_call, tool_ask
from inferopt.records import RequestRecord
from inferopt.transport.toolservice import ToolCall, ToolClient, ToolService
from inferopt.workload import build_workload

QUALITY = ModelSpec(path="builtin:quality-tiny")
FAKE = FakeSystem(
    seed=1, decode_step_ms=0.05, prefill_base_ms=0.1, batching=BatchingKnobs(max_batch_size=16, batch_wait_ms=0)
)
GATE = GateSettings(quality_bootstrap=200)
TASKS = Path(__file__).resolve().parents[2] / "inferopt" / "gate" / "tasks"


def _workload(n: int = 6, p: float = 1.0) -> WorkloadConfig:
    sc = SessionsConfig(
        num_sessions=n,
        turns=TurnsConfig(min=2, max=2),
        think=DelayConfig(kind="constant", mean_ms=0.0),
        tools=ToolConfig(probability=p, max_steps=2, latency=DelayConfig(kind="constant", mean_ms=0.0)),
    )
    return WorkloadConfig(name="tt", seed=3, arrival=PoissonArrivals(rate_per_s=500.0), sessions=sc)


def _codec():  # noqa: ANN202
    codec, why = codec_for(Path(TASKS).parents[1] / "model" / "builtin" / "quality-tiny")
    assert codec is not None, why
    return codec


class _Answers(FakeEngine):
    """The fake engine's timing, answering each ask turn in words: right, a wrong but valid call, or junk."""

    def __init__(self, system: FakeSystem, codec, mode) -> None:  # noqa: ANN001
        super().__init__(system)
        self.codec, self.mode, self.asked = codec, mode, {}

    def _script(self, request) -> list[int] | None:  # noqa: ANN001
        ask = tool_ask(request.request_id)
        tail = self.codec.encode(ask.prompt)
        if request.prompt_token_ids[-len(tail) :] != tail:
            return None
        self.asked[request.request_id] = request
        kind = self.mode(request.request_id)
        text = ask.expected
        if kind == "wrong":
            text = json.dumps(ask.args | {"order_id": str(int(ask.args["order_id"]) + 1)}, separators=(",", ":"))
        elif kind == "junk":
            text = "refund it please"
        return self.codec.encode(text) + [2]

    async def stream(self, request):  # noqa: ANN001, ANN201 - the engine protocol
        script, i = self._script(request), 0
        async for ev in super().stream(request):
            if isinstance(ev, TokenEvent) and script is not None:
                ids = [script[min(i + k, len(script) - 1)] for k in range(len(ev.token_ids))]
                i += len(ids)
                ev = replace(ev, token_ids=tuple(ids))
            yield ev


class _Tools:
    def __init__(self) -> None:
        self.args: dict[str, list[dict]] = {}

    async def call(self, sleep_ms: float, tokens: int, seed: int, args: dict | None = None) -> ToolCall:
        self.args.setdefault(str(seed), []).append(dict(args or {}))
        return ToolCall(token_ids=[5] * tokens, measured_s=0.0)


def _serve(table: pd.DataFrame, tmp_path: Path, arm: str, mode, tools=None):  # noqa: ANN001, ANN202
    codec = _codec()
    engine, tools = _Answers(FAKE, codec, mode), tools or _Tools()

    async def go():  # noqa: ANN202
        await engine.start()
        try:
            with SQLiteHistory(tmp_path / f"{arm}.sqlite") as store:
                return await run_sessions(
                    engine, table, vocab_size=288, timeout_s=10.0, tools=tools, history=store,
                    tags=RunTags(arm=arm), force_lengths=True, tool_turns=ToolTurns(codec, ""),
                )  # fmt: skip
        finally:
            await engine.stop()

    return asyncio.run(go()).records, engine, tools


def _half(rid: str) -> bool:
    return hashlib.sha256(rid.encode()).digest()[0] % 2 == 0


def test_the_format_is_the_suites() -> None:
    yaml_text = (TASKS / "inferopt_tool.yaml").read_text()
    assert int(re.search(r"max_gen_toks:\s*(\d+)", yaml_text).group(1)) == TOOL_ANSWER_TOKENS
    docs = [json.loads(line) for line in (TASKS / "data" / "tool.jsonl").read_text().splitlines()[:40]]
    for doc in docs:
        for answer in (doc["answer"], doc["answer"].replace('"order_id":"', '"order_id":"9'), "{}", "nope"):
            s, m = score_tool_call(answer, doc["answer"]), process_gen(doc, [answer])
            assert (m["args_exact"], m["json_valid"], m["numbers_exact"]) == (s.args_ok, s.json_valid, s.numbers_ok)
    asks = [tool_ask(f"w-s{i:04d}-t001") for i in range(40)]
    assert tool_ask("w-s0000-t001") == asks[0] and len({a.id for a in asks}) == 40
    assert {a.lang for a in asks} == {"en", "zh"} and all(_holdout("tool", a.args["order_id"]) for a in asks)
    assert all(score_tool_call(a.expected, a.expected).args_ok for a in asks)


def test_which_engines_are_asked_in_words() -> None:
    assert tool_turns_for(FAKE).codec is None and "scripted" in tool_turns_for(FAKE).reason
    hf = tool_turns_for(HFSystem(name="q", model=QUALITY))
    assert hf.codec is not None and hf.codec.eos_token_id == 2


def test_fake_engine_tool_turns_are_not_applicable_never_a_pass(tmp_path: Path) -> None:
    table = build_workload(_workload())
    run = run_system(FAKE, table, RunTags(arm="baseline"), timeout_s=10.0)
    assert not run.failed
    asked = [r for r in run.records if r.tool_ask_id]
    assert len(asked) == len(table)  # every turn plans tool steps (probability 1)
    assert all(r.tool_args_ok is None and r.tool_args_source == "expected" for r in asked)
    assert all(r.tool_note.startswith("not applicable") and r.tool_answer is None for r in asked)
    assert run.phases["tool_args_ok"].isna().all()
    st = session_tool_gate(run.records, run.records, GATE)
    assert st.status == "not_applicable" and "scripted" in st.reasons[0]
    assert overall_status(st.table) == "inconclusive"  # a lone not-applicable row is no pass
    for suite in ("pass", "skipped"):
        assert fold_session_tools(SuiteGate(suite, ["s"]), st).status == suite
    assert session_tool_gate(run.records, [], GATE).status == "not_applicable"
    plain = run_system(FAKE, build_workload(_workload(p=0.0)), RunTags(arm="baseline"), timeout_s=10.0)
    assert session_tool_gate(plain.records, plain.records, GATE).status == "none"


def test_answers_are_parsed_scored_and_call_the_tool(tmp_path: Path) -> None:
    table = build_workload(_workload(n=20))
    base, engine, tools = _serve(table, tmp_path, "baseline", lambda rid: "right")
    asked = [r for r in base if r.tool_ask_id]
    assert len(asked) == len(table) == len(engine.asked)
    assert all(r.tool_args_ok and r.tool_json_valid and r.tool_args_source == "model" for r in asked)
    req = next(iter(engine.asked.values()))
    assert req.max_new_tokens >= TOOL_ANSWER_TOKENS and not req.force_length  # free to end, at least the suite's
    called = {json.dumps(a) for calls in tools.args.values() for a in calls}
    assert called == {json.dumps(tool_ask(r.request_id).args) for r in asked}  # the model's (right) arguments
    cand, _, ctools = _serve(table, tmp_path, "candidate", lambda rid: "wrong" if _half(rid) else "junk")
    by = {r.request_id: r for r in cand if r.tool_ask_id}
    for rid, r in by.items():
        assert r.tool_args_ok is False
        assert r.tool_args_source == ("model" if _half(rid) else "expected")
        assert r.tool_json_valid is _half(rid) and r.tool_numbers_ok is False
    called = [a for calls in ctools.args.values() for a in calls]
    wrong = {json.dumps(tool_ask(rid).args | {"order_id": str(int(tool_ask(rid).args["order_id"]) + 1)}) for rid in by}
    expected = {json.dumps(tool_ask(rid).args) for rid in by}
    assert {json.dumps(a) for a in called} <= wrong | expected
    assert any(json.dumps(a) in wrong for a in called) and any(json.dumps(a) in expected for a in called)
    ph = phase_table(cand)
    assert ph["tool_args_ok"].eq(0.0).sum() == len(by) and phase_table(base)["tool_args_ok"].eq(1.0).all()
    st = session_tool_gate(base, cand, GATE)
    top = st.table.set_index(["slice", "metric"]).loc[("sessions:task=tool", "args_exact")]
    assert (top["base_mean"], top["cand_mean"], top["n"]) == (1.0, 0.0, len(table))
    assert top["status"] == "fail" and st.status == "fail"
    assert {"sessions:task=tool,lang=en", "sessions:task=tool,lang=zh"} <= set(st.table["slice"])
    folded = fold_session_tools(SuiteGate("pass", ["suite"]), st)
    assert folded.status == "fail" and "sessions_candidate" in folded.samples
    acc = folded.accuracy.set_index(["arm", "lang"])
    assert set(acc["context"]) == {"session"} and acc["n"].sum() == 2 * len(table)
    assert acc.xs("baseline")["accuracy"].eq(1.0).all() and acc.xs("candidate")["accuracy"].eq(0.0).all()
    assert session_tool_gate(base, base, GATE).status == "pass"


def test_tool_service_takes_the_arguments() -> None:
    async def calls(url: str) -> list[ToolCall]:
        client = ToolClient(url, vocab_size=100)
        try:
            a = await client.call(0.0, 6, 1, {"name": "cancel", "order_id": "1234"})
            b = await client.call(0.0, 6, 1, {"name": "cancel", "order_id": "1235"})
            c = await client.call(0.0, 6, 1, {"name": "cancel", "order_id": "1234"})
            return [a, b, c]
        finally:
            await client.close()

    with ToolService() as service:
        a, b, c = asyncio.run(calls(service.url))
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError, match="400"):
            urllib.request.urlopen(f"{service.url}/call?sleep_ms=0&tokens=1&seed=0&vocab=9&args=[1]", timeout=5)
    assert a.token_ids == c.token_ids != b.token_ids  # the result depends on the arguments


def test_records_keep_the_tool_fields() -> None:
    rec = RequestRecord("r", "ok", tool_ask_id="x", tool_args_ok=False, tool_answer="{}", tool_args_source="model")
    back = RequestRecord.from_dict(json.loads(rec.to_json()))
    assert (back.tool_args_ok, back.tool_answer, back.tool_args_source) == (False, "{}", "model")


def test_vllm_and_endpoints_ask_by_their_model(tmp_path: Path) -> None:
    from inferopt.config import OpenAISystem, VLLMSystem

    assert tool_turns_for(VLLMSystem(model=QUALITY)).codec is not None  # vLLM returns real ids (return_token_ids)
    endpoint = tool_turns_for(OpenAISystem(base_url="http://127.0.0.1:9", served_model="m", vocab_size=288))
    assert endpoint.codec is None and "no local model" in endpoint.reason
    assert codec_for(tmp_path)[0] is None and "no tokenizer.json" in codec_for(tmp_path)[1]
    ask, turns = tool_ask("e-s0000-t000"), ToolTurns(_codec(), "")
    placeholders = RequestRecord("e-s0000-t000", "ok", output_token_ids=[-1] * 8)  # an endpoint's counted tokens
    assert turns.score(placeholders, ask) == ask.args and placeholders.tool_args_ok is None
    assert "placeholders" in placeholders.tool_note and placeholders.tool_args_source == "expected"
    failed = RequestRecord("e-s0000-t000", "timeout")
    assert turns.score(failed, ask) == ask.args and failed.tool_note.endswith("timeout")


def test_an_asks_value_is_the_mean_over_trials() -> None:
    def rec(trial: int, ok: bool) -> RequestRecord:
        return RequestRecord(
            "s-t000", "ok", trial=trial, tool_ask_id="a", tool_lang="zh", tool_expected="{}", tool_answer="{}",
            tool_json_valid=True, tool_args_ok=ok, tool_numbers_ok=ok,
        )  # fmt: skip

    samples = turn_samples([rec(0, True), rec(1, False)]).set_index("metric")
    assert len(samples) == 4 and samples.loc["args_exact", "value"] == 0.5 and samples.loc["exact", "value"] == 1.0
