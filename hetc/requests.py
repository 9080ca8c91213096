"""What a command asks of the library: request dataclasses, checked on construction, whose
defaults are the CLI's (hetc/cli.py reads them from here, so the two cannot drift).

Light on purpose: the CLI imports this module to build its parser."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from hetc.errors import BadInput
from hetc.scheduling import MAX_WAITING, PREFILL_CHUNK, Disaggregate, Objective
from hetc.experts import DEFAULT_IMBALANCE, ExpertLayout
from hetc.speculation import MAX_SPECULATIVE_TOKENS, Acceptance, AcceptanceSource, SpeculationMethod, measured_acceptance

__all__ = ["SpecRequest", "BuyRequest", "CompareRequest", "EvaluateRequest", "LoadRequest", "PlanRequest", "ServeLimits", "SloRequest", "default"]

E = TypeVar("E", bound=StrEnum)


def _member(enum: type[E], value: str, flag: str) -> E:
    try:
        return enum(value)
    except ValueError:
        raise BadInput(f"unknown value {value!r}.", field=flag, fix=f"use one of {', '.join(e.value for e in enum)}.") from None


def default(request: type, name: str) -> Any:
    """The default of field `name` of a request dataclass (what the CLI shows and uses)."""
    for f in dataclasses.fields(request):
        if f.name == name:
            if f.default is dataclasses.MISSING:
                raise KeyError(f"{request.__name__}.{name} has no default")
            return f.default
    raise KeyError(f"{request.__name__} has no field {name}")


@dataclass(kw_only=True, slots=True)
class SpecRequest:
    """Speculative decoding to plan for (docs/speculation.md): a draft model (`draft`) or n-gram
    prompt lookup, K proposals per round, and the per-token acceptance α, given or read from a served
    run's /metrics (`acceptance_from`) — one of the two, never a default."""

    method: SpeculationMethod | None = None  # --speculate; DRAFT when `draft` is given
    draft: str | None = None  # --draft MODEL: a smaller model with the target's tokenizer
    num_speculative_tokens: int = 4  # K (vLLM's examples use 2-5; it has no default)
    acceptance: float | None = None
    acceptance_from: str | None = None  # a Prometheus /metrics text file
    proposal_rate: float | None = None  # rounds over decode steps (default: from --acceptance-from, else 1)

    def __post_init__(self) -> None:
        if self.method is not None:
            self.method = _member(SpeculationMethod, self.method, "--speculate")
        if self.draft is not None:
            if self.method is SpeculationMethod.NGRAM:
                raise BadInput("--draft names a draft model, --speculate ngram asks for none.", field="--speculate", fix="give one of them.")
            self.method = SpeculationMethod.DRAFT
        if self.method is None:
            return
        if self.method is SpeculationMethod.DRAFT and self.draft is None:
            raise BadInput("--speculate draft needs the draft model.", field="--draft", fix="give --draft MODEL (a smaller model with the target's tokenizer).")
        if not 1 <= self.num_speculative_tokens <= MAX_SPECULATIVE_TOKENS:
            raise BadInput(
                f"must be in 1 … {MAX_SPECULATIVE_TOKENS}, got {self.num_speculative_tokens}.",
                field="--num-speculative-tokens",
                fix=f"give the proposals per round K, at most {MAX_SPECULATIVE_TOKENS} (vLLM's examples use 2-5).",
            )
        if (self.acceptance is None) == (self.acceptance_from is None):
            raise BadInput(
                "speculation needs the per-token acceptance rate α, given once: "
                + ("both --acceptance and --acceptance-from were given." if self.acceptance is not None else "neither was given (hetc assumes none)."),
                field="--acceptance",
                fix="give --acceptance 0.7 (α in [0, 1]) or --acceptance-from METRICS (a served run's /metrics text).",
            )
        if self.acceptance is not None and not 0.0 <= self.acceptance <= 1.0:
            raise BadInput(f"must be in [0, 1], got {self.acceptance}.", field="--acceptance", fix="give the per-token acceptance α, e.g. 0.7.")
        if self.proposal_rate is not None and not 0.0 < self.proposal_rate <= 1.0:
            raise BadInput(
                f"must be in (0, 1], got {self.proposal_rate}.",
                field="--proposal-rate",
                fix="give the share of decode steps that propose (n-gram lookup proposes only where it finds a match; 1: every step).",
            )

    @property
    def on(self) -> bool:
        return self.method is not None

    def alpha(self) -> Acceptance:
        """α, its source and where from, and the proposal rate: --acceptance as given, or a served
        run's /metrics read (hetc.speculation.measured_acceptance: vLLM's accepted/drafted share
        turned into α, hetc's rounds over decode steps the rate); --proposal-rate over either.

        Raises:
            BadInput: the metrics file cannot be read or holds no speculation counters.
        """
        if self.acceptance is not None:
            return Acceptance(self.acceptance, AcceptanceSource.GIVEN, "--acceptance", self.proposal_rate or 1.0)
        path = Path(self.acceptance_from or "")
        fix = "save /metrics of a run served with speculation (curl URL/metrics > FILE), or give --acceptance α."
        try:
            m = measured_acceptance(path.read_text(), self.num_speculative_tokens)
        except OSError as e:
            raise BadInput(f"cannot read it ({e.strerror}).", file=str(path), field="--acceptance-from", fix=fix) from None
        except ValueError as e:
            raise BadInput(f"{e}.", file=str(path), field="--acceptance-from", fix=fix) from None
        where = f"{path} (accepted/drafted {m.share:.4f} over K={m.k}: α {m.alpha:.4f}; rounds over decode steps {m.proposal_rate:.4f})"
        return Acceptance(m.alpha, AcceptanceSource.MEASURED, where, self.proposal_rate or m.proposal_rate)


@dataclass(kw_only=True, slots=True)
class PlanRequest:
    model: str
    profiles: str
    dtype: str = "bf16"
    kv_dtype: str | None = None
    input_len: int = 1024
    output_len: int = 256
    objective: Objective = Objective.THROUGHPUT
    min_tok_s: float = 0.0
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    disaggregate: Disaggregate = Disaggregate.AUTO
    tp: str = "auto"
    time_limit: float = 30.0
    engine: str | None = None  # --engine: the serving engine every node's figures assume (hetc/engine.py); None: the cluster file's, else hetc
    power_budget_w: float | None = None
    placement: str | None = None  # evaluate this placement (hetc/placement.py) instead of searching
    batch: int | None = None  # with placement: sequences in flight per pipeline (default: the best)
    max_num_seqs: int | None = None  # most sequences in flight per pipeline, as engines cap it (default: what memory admits)
    prefix_len: int = 0  # every prompt's first tokens are one of prefix_groups shared prefixes (priced as prefix-cache hits)
    prefix_groups: int = 1
    spec: SpecRequest = dataclasses.field(default_factory=SpecRequest)  # speculative decoding (off by default)
    experts: str = "default"  # --experts: an MoE model's layout (hetc/experts.py); default: the engines' own; auto: each they serve, the best kept
    imbalance: float = DEFAULT_IMBALANCE  # --expert-imbalance: the busiest device's routed rows over the mean under EP

    def __post_init__(self) -> None:
        _check_engine(self.engine)
        if self.experts not in ("default", "auto"):
            self.experts = _member(ExpertLayout, self.experts, "--experts")
        if not self.imbalance >= 1.0:
            raise BadInput(
                f"must be ≥ 1, got {self.imbalance}.",
                field="--expert-imbalance",
                fix="give the busiest device's routed tokens over the mean (1: perfectly balanced; default 1.2).",
            )
        for name in ("input_len", "output_len"):
            if getattr(self, name) < 1:
                raise BadInput(f"must be ≥ 1, got {getattr(self, name)}.", field=f"--{name.replace('_', '-')}", fix="give a positive number of tokens.")
        _check_prefix(self.prefix_len, self.prefix_groups)
        if self.prefix_groups > 1 and not self.prefix_len:
            raise BadInput(f"--prefix-groups {self.prefix_groups} without a shared prefix.", field="--prefix-groups", fix="give --prefix-len N too.")
        self.objective = _member(Objective, self.objective, "--objective")
        self.disaggregate = _member(Disaggregate, self.disaggregate, "--disaggregate")
        if self.batch is not None and (self.batch < 1 or not self.placement):
            raise BadInput(
                f"--batch {self.batch} needs --placement and must be ≥ 1.",
                field="--batch",
                fix="give --placement SPEC with it (the solver chooses batches itself otherwise).",
            )
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise BadInput(
                f"must be ≥ 1, got {self.max_num_seqs}.",
                field="--max-num-seqs",
                fix="give the most sequences one pipeline (engine) runs at once, e.g. vLLM's max_num_seqs 256.",
            )
        if self.batch is not None and self.max_num_seqs is not None and self.batch > self.max_num_seqs:
            raise BadInput(
                f"--batch {self.batch} is above --max-num-seqs {self.max_num_seqs}.", field="--batch", fix="give a batch at most the cap, or raise the cap."
            )
        if self.power_budget_w is not None and not self.power_budget_w > 0:
            raise BadInput(f"must be > 0 W, got {self.power_budget_w}.", field="--power-budget", fix="give the watts the plan's devices may draw together.")
        for name in ("min_tok_s", "ttft_slo_ms", "tpot_slo_ms", "time_limit"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise BadInput(f"must be ≥ 0, got {v}.", field=f"--{name.replace('_', '-')}", fix="give a non-negative value.")
        if self.disaggregate == Disaggregate.ON and self.objective != Objective.THROUGHPUT:
            raise BadInput(
                f"prefill/decode pools are planned for the throughput objective only, not {self.objective}.",
                field="--disaggregate",
                fix="use --objective throughput, or --disaggregate off.",
            )
        if self.tp not in ("auto", "1"):
            raise BadInput(f"unknown value {self.tp!r}.", field="--tp", fix="use auto or 1.")
        if self.spec.on and self.disaggregate == Disaggregate.ON:
            raise BadInput(
                "speculative decoding is planned without prefill/decode pools in this version.",
                field="--disaggregate",
                fix="use --disaggregate auto (speculation then plans pools off) or off, or leave out --draft/--speculate.",
            )
        if self.spec.on and self.placement:
            raise BadInput("a given --placement is evaluated without speculation in this version.", field="--placement", fix="leave out --draft/--speculate.")


@dataclass(kw_only=True, slots=True)
class ServeLimits:
    """The server settings a simulation runs under, as `hetc serve` takes them (same defaults)."""

    max_num_seqs: int | None = None  # None: the plan's largest batch, at least 2 per stage
    max_batched_tokens: int = PREFILL_CHUNK
    max_waiting: int = MAX_WAITING
    max_queue_wait: float = 30.0  # seconds: a longer predicted wait for a first token is refused (429)
    num_kv_blocks: int | None = None  # cap on each lane's KV blocks
    prefix_caching: bool = True  # reuse cached KV of shared prompt prefixes (--no-prefix-caching: off)

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_batched_tokens", "max_waiting", "num_kv_blocks"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise BadInput(f"must be ≥ 1, got {v}.", field=f"--{name.replace('_', '-')}", fix="give a positive number.")
        if self.max_queue_wait < 0:
            raise BadInput(f"must be ≥ 0, got {self.max_queue_wait}.", field="--max-queue-wait", fix="give seconds.")


@dataclass(kw_only=True, slots=True)
class LoadRequest:
    """A load to simulate: open loop at `rate` (Poisson, or gamma with `burstiness`), closed loop of
    `concurrency` clients, or a JSONL `trace`; neither rate nor concurrency nor trace: a closed loop of
    as many clients as the plan's pipelines hold sequences (its own operating point)."""

    rate: float | None = None  # requests/s
    concurrency: int | None = None
    trace: str | None = None
    requests: int = 1000
    input_len_dist: str | None = None  # default: the plan's input length, fixed
    output_len_dist: str | None = None
    burstiness: float = 1.0
    seed: int = 0
    warmup: str | None = None  # left out of the figures at the start: N requests, Ts seconds or P% (capacity/window.py)
    cooldown: str | None = None  # left out at the end, as warmup
    prefix_len: int | None = None  # shared prompt prefix tokens (default: the plan's workload's)
    prefix_groups: int | None = None  # distinct shared prefixes (default: the plan's workload's)

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.rate, self.concurrency, self.trace)) > 1:
            raise BadInput("--rate, --concurrency and --trace each define the arrivals; got more than one.", field="--rate", fix="give one of them.")
        if self.trace and (self.input_len_dist or self.output_len_dist):
            raise BadInput("a trace gives every request's lengths.", field="--trace", fix="drop --input-len-dist/--output-len-dist, or the trace.")
        if self.rate is not None and not self.rate > 0:
            raise BadInput(f"must be > 0, got {self.rate}.", field="--rate", fix="give requests per second.")
        if self.concurrency is not None and self.concurrency < 1:
            raise BadInput(f"must be ≥ 1, got {self.concurrency}.", field="--concurrency", fix="give clients.")
        if self.requests < 1:
            raise BadInput(f"must be ≥ 1, got {self.requests}.", field="--requests", fix="give a number of requests.")
        if not self.burstiness > 0:
            raise BadInput(f"must be > 0, got {self.burstiness}.", field="--burstiness", fix="1 is Poisson; smaller is burstier, larger more even.")
        _check_prefix(self.prefix_len, self.prefix_groups)
        if self.trace and (self.prefix_len is not None or self.prefix_groups is not None):
            raise BadInput(
                "a trace gives every request's shared prefix (prefix_len, prefix_id).", field="--trace", fix="drop --prefix-len/--prefix-groups, or the trace."
            )


@dataclass(kw_only=True, slots=True)
class SloRequest:
    """Latency targets: vLLM's goodput counts requests meeting both; DistServe's is the highest rate at
    which `attainment` of them do."""

    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    attainment: float = 0.9

    def __post_init__(self) -> None:
        if not 0 < self.attainment <= 1:
            raise BadInput(
                f"must be in (0, 1], got {self.attainment}.", field="--attainment", fix="give the share of requests that must meet the SLOs, e.g. 0.9."
            )
        for name in ("ttft_slo_ms", "tpot_slo_ms"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise BadInput(f"must be > 0 ms, got {v}.", field=f"--{name[:4]}-slo", fix="give milliseconds.")


def _check_prefix(length: int | None, groups: int | None) -> None:
    if length is not None and length < 0:
        raise BadInput(f"must be ≥ 0, got {length}.", field="--prefix-len", fix="give the shared prompt tokens (0: none).")
    if groups is not None and groups < 1:
        raise BadInput(f"must be ≥ 1, got {groups}.", field="--prefix-groups", fix="give how many distinct shared prefixes the prompts begin with.")


def _check_engine(engine: str | None) -> None:
    """A --engine value names a known engine (and release) before any work."""
    if engine is not None:
        from hetc.engine import Engine  # noqa: PLC0415 — reads the engines' files; the parser does not need it

        Engine.parse(engine)


def _check_pue(pue: float) -> None:
    if pue < 1:
        raise BadInput(f"must be ≥ 1, got {pue}.", field="--pue", fix="1.0 counts the devices only; data centres report 1.1–1.6.")


@dataclass(kw_only=True, slots=True)
class EvaluateRequest:
    """`hetc evaluate PLAN.json`: serve the plan under a load, simulated."""

    plan: str
    load: LoadRequest = dataclasses.field(default_factory=LoadRequest)
    limits: ServeLimits = dataclasses.field(default_factory=ServeLimits)
    slo: SloRequest = dataclasses.field(default_factory=SloRequest)
    pue: float = 1.0  # power usage effectiveness: facility watts per device watt
    engine: str | None = None  # --engine: simulate the plan under this engine's figures (None: the engine the plan names)

    def __post_init__(self) -> None:
        _check_pue(self.pue)
        _check_engine(self.engine)


@dataclass(kw_only=True, slots=True)
class CompareRequest:
    """`hetc compare`: plan files, or one model planned on each cluster, under one simulated load."""

    plans: list[str] = dataclasses.field(default_factory=list)
    model: str | None = None  # with profiles: planned on each
    profiles: list[str] = dataclasses.field(default_factory=list)
    dtype: str = "bf16"
    input_len: int = 1024
    output_len: int = 256
    time_limit: float = 30.0
    engine: str | None = None  # --engine: the serving engine every node's figures assume (hetc/engine.py); None: the cluster file's, else hetc
    load: LoadRequest = dataclasses.field(default_factory=LoadRequest)
    limits: ServeLimits = dataclasses.field(default_factory=ServeLimits)
    slo: SloRequest = dataclasses.field(default_factory=SloRequest)
    pue: float = 1.0

    def __post_init__(self) -> None:
        _check_engine(self.engine)
        _check_pue(self.pue)
        if self.profiles and (self.plans or not self.model):
            raise BadInput(
                f"with --profiles, give one MODEL; got {' '.join(self.plans) or 'none'}.", field="MODEL", fix="hetc compare --profiles c1.yaml c2.yaml MODEL"
            )
        if not self.profiles and not self.plans:
            raise BadInput("nothing to compare.", field="PLAN.json", fix="hetc compare A.json B.json, or hetc compare --profiles c1.yaml c2.yaml MODEL")


@dataclass(kw_only=True, slots=True)
class BuyRequest:
    """`hetc buy`: the cheapest fleet from a catalog serving `rate` within the SLOs (or, with a budget,
    the most output tok/s within it), its placement, and the SLOs checked by simulating it."""

    model: str
    rate: float  # requests/s the fleet must sustain
    input_len: int = 1024
    output_len: int = 256
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    dtype: str = "bf16"
    kv_dtype: str | None = None
    tp: str = "auto"
    time_limit: float = 30.0
    engine: str | None = None  # --engine: the serving engine every node's figures assume (hetc/engine.py); None: the cluster file's, else hetc
    budget_usd_h: float | None = None  # set: the most output tok/s within it, instead of the cheapest fleet
    attainment: float = 0.9  # the simulated check: this share of requests must meet the SLOs
    requests: int = 1000  # the simulated check's Poisson requests at `rate`

    def __post_init__(self) -> None:
        _check_engine(self.engine)
        if self.budget_usd_h is not None and not self.budget_usd_h > 0:
            raise BadInput(f"must be > 0, got {self.budget_usd_h}.", field="--budget", fix="give USD per hour.")
        if not self.rate > 0:
            raise BadInput(f"must be > 0, got {self.rate}.", field="--rate", fix="give the requests per second to serve.")
        for name in ("input_len", "output_len"):
            if getattr(self, name) < 1:
                raise BadInput(f"must be ≥ 1, got {getattr(self, name)}.", field=f"--{name.replace('_', '-')}", fix="give a positive number of tokens.")

    @property
    def output_tok_s(self) -> float:
        """The output rate the load needs: every request's output tokens, rate times a second."""
        return self.rate * self.output_len
