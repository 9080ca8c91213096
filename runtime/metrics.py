"""Prometheus metrics of the server (one registry per server, served at /metrics)."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]

_LAT = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_STEP = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """Request latencies, queue state, tokens, and per-stage parameter bytes and step times."""

    def __init__(self, model: str):
        r = self.registry = CollectorRegistry()
        lbl = ["model"]
        self.model = model
        self.ttft = Histogram("hetc_time_to_first_token_seconds", "Arrival to first generated token.", lbl, buckets=_LAT, registry=r)
        self.itl = Histogram("hetc_inter_token_latency_seconds", "Between consecutive generated tokens of a request.", lbl, buckets=_LAT, registry=r)
        self.e2e = Histogram("hetc_e2e_request_latency_seconds", "Arrival to last token.", lbl, buckets=_LAT, registry=r)
        self.queue = Histogram("hetc_request_queue_time_seconds", "Arrival to first scheduled.", lbl, buckets=_LAT, registry=r)
        self.running = Gauge("hetc_num_requests_running", "Sequences holding KV now.", lbl, registry=r)
        self.waiting = Gauge("hetc_num_requests_waiting", "Sequences in the wait queue now.", lbl, registry=r)
        self.peak_running = Gauge("hetc_num_requests_running_peak", "Most sequences running at once so far.", lbl, registry=r)
        self.batch_seqs = Histogram(
            "hetc_micro_batch_sequences", "Sequences per micro-batch sent.", lbl, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r
        )
        self.gen_tokens = Counter("hetc_generation_tokens", "Generated tokens.", lbl, registry=r)
        self.prompt_tokens = Counter("hetc_prompt_tokens", "Tokens prefilled (prompts, and recomputation after preemption).", lbl, registry=r)
        self.requests = Counter("hetc_request_success", "Finished requests by reason.", ["model", "finished_reason"], registry=r)
        self.preemptions = Gauge("hetc_num_preemptions", "Sequences preempted (KV freed, recomputed) so far.", lbl, registry=r)
        self.kv_used = Gauge("hetc_kv_blocks_used", "KV blocks in use.", ["model", "lane"], registry=r)
        self.kv_total = Gauge("hetc_kv_blocks_total", "KV blocks of the lane's pool.", ["model", "lane"], registry=r)
        st = ["model", "stage", "device"]
        self.stage_params = Gauge("hetc_stage_parameter_bytes", "Parameter bytes a stage worker (one device) holds.", st, registry=r)
        self.stage_plan_params = Gauge("hetc_stage_planned_weight_bytes", "The plan's weight bytes for one device of the stage.", st, registry=r)
        self.stage_kv_bytes = Gauge("hetc_stage_kv_pool_bytes", "Bytes of the stage's KV pool.", st, registry=r)
        self.stage_executor = Gauge(
            "hetc_stage_executor_info",
            "1 for what runs each stage's device: torch eager or a toolchain's lowering.",
            ["model", "stage", "device", "executor"],
            registry=r,
        )
        self.stage_step = Histogram(
            "hetc_stage_step_seconds", "Measured compute time of one micro-batch on a stage.", [*st, "phase"], buckets=_STEP, registry=r
        )
        self.stage_pred = Gauge("hetc_stage_predicted_step_seconds", "The plan's step time for the stage at its operating point.", [*st, "phase"], registry=r)
        self.stage_busy = Counter("hetc_stage_busy_seconds", "Compute time summed over micro-batches.", st, registry=r)
        self.graph_steps = Counter(
            "hetc_stage_cuda_graph_steps",
            "Decode micro-batches a stage replayed from a CUDA graph (the rest of its hetc_stage_step_seconds count ran eagerly).",
            st,
            registry=r,
        )
        self.step_rtt = Histogram("hetc_pipeline_step_seconds", "Send to result of one micro-batch, whole pipeline.", lbl, buckets=_STEP, registry=r)
        self.kv_sent = Counter("hetc_kv_transfer_bytes", "KV bytes sent from prefill to decode pools.", lbl, registry=r)
        self.kv_sent_tokens = Counter("hetc_kv_transfer_tokens", "Token positions whose KV was sent between pools.", lbl, registry=r)
        pc = "prompt tokens looked up in the prefix cache on admission (recomputation after preemption included)"
        self.prefix_queries = Counter("hetc_prefix_cache_queries", f"Tokens: {pc}.", lbl, registry=r)
        self.prefix_hits = Counter("hetc_prefix_cache_hits", "Tokens: of those looked up, found cached (their prefill skipped).", lbl, registry=r)
        # vLLM's names and label, for dashboards and clients written against vLLM
        self.vllm_prefix_queries = Counter("vllm:prefix_cache_queries", f"Tokens: {pc} (vLLM's name).", ["model_name"], registry=r)
        self.vllm_prefix_hits = Counter("vllm:prefix_cache_hits", "Tokens found in the prefix cache (vLLM's name).", ["model_name"], registry=r)
        for c in (self.prefix_queries, self.prefix_hits, self.vllm_prefix_queries, self.vllm_prefix_hits):
            c.labels(model)  # shown at 0 from the start
        # speculative decoding (docs/speculation.md), hetc's names and vLLM's side by side
        self.spec_rounds = Counter("hetc_spec_decode_rounds", "Speculative rounds verified (one per sequence and step with proposals).", lbl, registry=r)
        self.spec_steps = Counter("hetc_spec_decode_steps", "Decode steps that asked for proposals (rounds over these: the proposal rate).", lbl, registry=r)
        self.spec_draft = Counter("hetc_spec_decode_draft_tokens", "Proposals verified.", lbl, registry=r)
        self.spec_accepted = Counter("hetc_spec_decode_accepted_tokens", "Proposals the target accepted.", lbl, registry=r)
        self.spec_rejected = Counter(
            "hetc_spec_decode_rejected_rounds", "Rounds that ended with a rejected proposal (α = accepted / (accepted + this)).", lbl, registry=r
        )
        self.spec_pos = Counter(
            "hetc_spec_decode_accepted_tokens_per_pos", "Rounds whose proposal at this position was accepted.", [*lbl, "position"], registry=r
        )
        self.spec_fallback = Counter(
            "hetc_spec_decode_fallback_requests", "Requests decoded one token per step although the server speculates, by reason.", [*lbl, "reason"], registry=r
        )
        self.vllm_spec_drafts = Counter("vllm:spec_decode_num_drafts", "Speculative rounds (vLLM's name).", ["model_name"], registry=r)
        self.vllm_spec_draft = Counter("vllm:spec_decode_num_draft_tokens", "Proposals verified (vLLM's name).", ["model_name"], registry=r)
        self.vllm_spec_accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Proposals accepted (vLLM's name).", ["model_name"], registry=r)
        self.vllm_spec_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted proposals per position (vLLM's name).", ["model_name", "position"], registry=r
        )
        for c in (
            self.spec_rounds,
            self.spec_steps,
            self.spec_draft,
            self.spec_accepted,
            self.spec_rejected,
            self.vllm_spec_drafts,
            self.vllm_spec_draft,
            self.vllm_spec_accepted,
        ):
            c.labels(model)
        self.up = Gauge("hetc_up", "1 while every worker is alive.", lbl, registry=r)
        self.up.labels(model).set(1)
        self._peak = 0
        self._lock = threading.Lock()
        self._stage_labels: dict[tuple[int, int], tuple[str, str]] = {}

    def register_worker(self, lane: int, index: int, device: str, param_bytes: int, plan_weights: float, kv_bytes: int, executor: str = "torch") -> None:
        """One device of a stage (a tp stage has several)."""
        key = (f"{lane}.{index}", device)
        self.stage_executor.labels(self.model, *key, executor).set(1)
        self.stage_params.labels(self.model, *key).set(param_bytes)
        self.stage_plan_params.labels(self.model, *key).set(plan_weights)
        self.stage_kv_bytes.labels(self.model, *key).set(kv_bytes)

    def register_stage(self, lane: int, index: int, device: str, predicted_ms: tuple[float, float]) -> None:
        """A stage's step times, labelled with its leading device."""
        key = (f"{lane}.{index}", device)
        self._stage_labels[(lane, index)] = key
        self.stage_pred.labels(self.model, *key, "prefill").set(predicted_ms[0] / 1e3)
        self.stage_pred.labels(self.model, *key, "decode").set(predicted_ms[1] / 1e3)

    def register_lane(self, lane: int, blocks: int) -> None:
        self.kv_total.labels(self.model, str(lane)).set(blocks)

    # engine hooks (called with the lane's lock held where noted; cheap)
    def on_queue(self, engine) -> None:
        self.waiting.labels(self.model).set(engine.num_waiting())

    def on_schedule(self, runner, batch) -> None:  # lane lock held
        eng = runner.engine
        self.batch_seqs.labels(self.model).observe(len(batch.items))
        # prefill work: every token but single decode tokens (recomputation after preemption included)
        self.prompt_tokens.labels(self.model).inc(sum(i.n_new for i in batch.items if i.n_new - len(i.draft) > 1 or i.start < i.seq.num_prompt_tokens))
        if batch.prefix_queried:
            self.prefix_queries.labels(self.model).inc(batch.prefix_queried)
            self.prefix_hits.labels(self.model).inc(batch.prefix_hits)
            self.vllm_prefix_queries.labels(self.model).inc(batch.prefix_queried)
            self.vllm_prefix_hits.labels(self.model).inc(batch.prefix_hits)
        running = eng.num_running()
        with self._lock:
            self._peak = max(self._peak, running)
            self.peak_running.labels(self.model).set(self._peak)
        self.running.labels(self.model).set(running)
        self.waiting.labels(self.model).set(eng.num_waiting())
        self.kv_used.labels(self.model, str(runner.lane.id)).set(runner.sched.blocks.num_used)
        self.preemptions.labels(self.model).set(sum(r.sched.num_preemptions for r in eng.lanes))

    def on_step(self, runner, batch, stage_times: list[float], rtt: float) -> None:  # lane lock held
        """Args:
        stage_times: per stage its compute seconds, then per stage 1.0 where it replayed a CUDA graph.
        """
        phase = "prefill" if batch.has_prefill else "decode"
        n = len(runner.lane.stages)
        for i, t in enumerate(stage_times[:n]):
            key = self._stage_labels.get((runner.lane.id, i))
            if key:
                self.stage_step.labels(self.model, *key, phase).observe(t)
                self.stage_busy.labels(self.model, *key).inc(t)
                if stage_times[n + i] > 0:
                    self.graph_steps.labels(self.model, *key).inc()
        self.step_rtt.labels(self.model).observe(rtt)
        eng = runner.engine
        self.running.labels(self.model).set(eng.num_running())
        self.waiting.labels(self.model).set(eng.num_waiting())
        self.kv_used.labels(self.model, str(runner.lane.id)).set(runner.sched.blocks.num_used)

    def on_rounds(self, outs) -> None:
        """A result's speculative rounds (StepOutput.drafted / accepted)."""
        for o in outs:
            if o.asked:
                self.spec_steps.labels(self.model).inc()
            if not o.drafted:
                continue
            m = self.model
            for c, v in ((self.spec_rounds, 1), (self.spec_draft, o.drafted), (self.spec_accepted, o.accepted), (self.spec_rejected, o.accepted < o.drafted)):
                c.labels(m).inc(v)
            for c, v in ((self.vllm_spec_drafts, 1), (self.vllm_spec_draft, o.drafted), (self.vllm_spec_accepted, o.accepted)):
                c.labels(m).inc(v)
            for pos in range(o.accepted):
                self.spec_pos.labels(m, str(pos)).inc()
                self.vllm_spec_pos.labels(m, str(pos)).inc()

    def on_fallback(self, reason: str) -> None:
        """A request that cannot speculate (hetc.spec_rounds.Fallback) decodes one token per step."""
        self.spec_fallback.labels(self.model, reason).inc()

    def on_token(self, req, now: float) -> None:
        self.gen_tokens.labels(self.model).inc()
        if req.first_token_at is None:
            self.ttft.labels(self.model).observe(now - req.arrival)
            if req.seq.first_scheduled is not None:
                self.queue.labels(self.model).observe(max(0.0, req.seq.first_scheduled - req.arrival))
        elif req.last_token_at is not None:
            self.itl.labels(self.model).observe(now - req.last_token_at)

    def on_finish(self, req, now: float) -> None:
        self.e2e.labels(self.model).observe(now - req.arrival)
        self.requests.labels(self.model, req.seq.finish_reason or "unknown").inc()

    def on_transfer(self, tokens: int, nbytes: float) -> None:
        self.kv_sent_tokens.labels(self.model).inc(tokens)
        self.kv_sent.labels(self.model).inc(nbytes)

    def on_fail(self) -> None:
        self.up.labels(self.model).set(0)

    def on_revive(self) -> None:
        self.up.labels(self.model).set(1)
