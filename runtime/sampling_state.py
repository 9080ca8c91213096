"""Per-sequence sampling state and log-probabilities: the last stage's half, and the frontend's.

What the sampler (sampler.py) needs beyond a row's (temperature, top_p, top_k, seed) lives here,
in one place beside it on the last stage: a sequence's `SeqState` (logit_bias, min_tokens, the
token counts presence/frequency/repetition penalties read, and the grammar matcher of a
constrained sequence: grammar.py) is created when the sequence is
admitted to a lane (its first step there, or its first after a preemption) and updated with
every token the stage sees go in. The last stage sees every token of the sequence in order —
prompt chunks, then each sampled token as the next step's input (looked-ahead ones filled in by
the first stage before the step reaches it: feedback.py) — so the counts are exact whatever the
lookahead, and the state of a sequence arriving from a prefill pool starts from the history its
setup carries. A grammar matcher consumes each generated token as it goes in, so it has seen
every token before the one it masks for: looked-ahead steps need nothing more.

The frontend's half (`LaneSampling.extras`) writes what a step needs into StepMeta.extras:
`setup` (a sequence's state, with the tokens before this step), `release` (sequences gone from
the lane), `lp` (rows whose sampled token's log-probabilities are returned) and `plp` (sequences
whose prompt log-probabilities this step computes: all their rows go past the cut). The last
stage returns log-probabilities in the RESULT message (`encode_logprobs`/`decode_logprobs`).

Log-probabilities are of the model's own distribution: log_softmax of the raw logits, before
bias, penalties, temperature and filters (vLLM's default, `raw_logprobs`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from hetc.batching import GRAMMAR_ERROR
from hetc.runtime.sampler import GREEDY_TEMPERATURE, sample

if TYPE_CHECKING:
    from hetc.batching import BatchItem
    from hetc.runtime.grammar import Grammars
    from hetc.runtime.transport import StepMeta

__all__ = ["LaneSampling", "Logprob", "SamplingStates", "SeqState", "decode_logprobs", "sample_rows", "sample_step"]


@dataclass(frozen=True, slots=True)
class Logprob:
    """One position's log-probabilities: its token's, and the top ones in order."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token, logprob), most likely first


# ---- the last stage ------------------------------------------------------------------------


@dataclass(slots=True)
class SeqState:
    """One sequence's sampling state on the last stage."""

    num_prompt: int
    presence: float = 0.0
    frequency: float = 0.0
    repetition: float = 1.0
    bias: list[tuple[int, float]] = field(default_factory=list)
    min_tokens: int = 0
    stops: list[int] = field(default_factory=list)  # masked until min_tokens were generated (EOS unless ignore_eos, stop_token_ids)
    pending: list[tuple[int, bool]] = field(default_factory=list)  # (token, generated) seen, not yet counted
    counts: torch.Tensor | None = None  # [V] fp32 each token's count among the generated ones
    seen: torch.Tensor | None = None  # [V] bool in the prompt or generated
    matcher: Any = None  # llguidance.LLMatcher of a constrained sequence: has consumed every generated token seen
    words: torch.Tensor | None = None  # [ceil(V / 32)] int32 the matcher's mask is computed into
    failed: str | None = None  # why the grammar cannot go on (its sequence ends with an error)

    @staticmethod
    def from_setup(rec: dict, grammars: Callable[[list[int]], Grammars] | None = None) -> "SeqState":
        """A sequence's state from its setup record (LaneSampling.extras); `grammars`: the stage's
        grammar state for the given EOS ids, for a record carrying a grammar."""
        st = SeqState(rec["n"], rec["pres"], rec["freq"], rec["rep"], [(int(t), float(v)) for t, v in rec["bias"]], rec["min"], rec["stops"])
        if rec.get("grammar") is not None:
            try:
                if grammars is None:
                    raise RuntimeError("this stage holds no grammar state")
                st.matcher = grammars(rec["eos"]).matcher(rec["grammar"])
            except Exception as e:  # noqa: BLE001 — this sequence fails, not the worker
                st.failed = f"{type(e).__name__}: {e}"
        st.observe(rec["hist"], 0)
        return st

    def observe(self, tokens: Iterable[int], start: int) -> None:
        """Tokens at positions start, start + 1, ... went into the model."""
        seen = [(t, start + j >= self.num_prompt) for j, t in enumerate(tokens)]
        self.pending.extend(seen)
        if self.matcher is not None and self.failed is None:
            for t, generated in seen:
                if generated and not self.matcher.consume_token(t):
                    self.failed = f"the grammar refused token {t}: {self.matcher.get_error()}"
                    break

    def _count(self, vocab: int, device: torch.device) -> None:
        if self.counts is None:
            self.counts = torch.zeros(vocab, dtype=torch.float32, device=device)
            self.seen = torch.zeros(vocab, dtype=torch.bool, device=device)
        if self.pending:
            ids = torch.tensor([t for t, _ in self.pending], dtype=torch.long, device=device)
            gen = [t for t, g in self.pending if g]
            self.seen[ids] = True  # type: ignore[index]
            if gen:
                g = torch.tensor(gen, dtype=torch.long, device=device)
                self.counts.index_add_(0, g, torch.ones(len(gen), dtype=torch.float32, device=device))
            self.pending.clear()

    def apply(self, row: torch.Tensor, position: int) -> None:
        """Adjust `row` [V] (fp32 logits) in place for the token at `position`, in vLLM's order:
        logit_bias and min_tokens, then the repetition, frequency and presence penalties, then
        the grammar's mask (tokens it does not allow next: -inf)."""
        if self.bias:
            ids = torch.tensor([t for t, _ in self.bias], dtype=torch.long, device=row.device)
            row.index_add_(0, ids, torch.tensor([v for _, v in self.bias], dtype=row.dtype, device=row.device))
        if self.stops and position - self.num_prompt < self.min_tokens:
            row[torch.tensor(self.stops, dtype=torch.long, device=row.device)] = float("-inf")
        if self.repetition != 1.0 or self.frequency or self.presence:
            self._penalize(row)
        if self.matcher is not None and self.failed is None:
            from hetc.runtime.grammar import mask_row

            if self.stops and position - self.num_prompt < self.min_tokens and self.matcher.is_stopped():
                self.failed = f"the grammar is complete after {position - self.num_prompt} tokens, before min_tokens ({self.min_tokens}): only EOS is left"
                return

            if self.words is None:
                self.words = torch.zeros((row.numel() + 31) // 32, dtype=torch.int32)
            mask_row(self.matcher, row, self.words)

    def _penalize(self, row: torch.Tensor) -> None:
        self._count(row.numel(), row.device)
        assert self.counts is not None and self.seen is not None
        if self.repetition != 1.0:
            # vLLM's: over prompt and generated tokens, a positive logit divided by it, a negative one multiplied
            r = torch.where(row > 0, row / self.repetition, row * self.repetition)
            row.copy_(torch.where(self.seen, r, row))
        if self.frequency:
            row.sub_(self.frequency * self.counts)
        if self.presence:
            row.sub_(self.presence * (self.counts > 0).to(row.dtype))


class SamplingStates:
    """The last stage's `SeqState`s, by sequence id (one owner: the stage's leader)."""

    def __init__(self, grammars: Callable[[list[int]], Grammars] | None = None) -> None:
        """Args:
        grammars: EOS ids → the stage's grammar state (built on the first constrained sequence).
        """
        self.seqs: dict[int, SeqState] = {}
        self.grammars = grammars

    def begin(self, meta: StepMeta) -> None:
        """A step arrived (its looked-ahead tokens filled in): release, set up, then count its inputs."""
        ex = meta.extras
        for sid in ex.get("release", ()):
            self.seqs.pop(sid, None)
        for i, rec in ex.get("setup", ()):
            self.seqs[meta.seq_ids[i]] = SeqState.from_setup(rec, self.grammars)
        if not self.seqs:
            return
        off = 0
        for sid, start, n in zip(meta.seq_ids, meta.starts, meta.n_new):
            st = self.seqs.get(sid)
            if st is not None:
                st.observe(meta.token_ids[off : off + n], start)
            off += n


def _rows_kept(meta: StepMeta) -> tuple[list[int], dict[int, int]]:
    """(the row of the model's output each sampled item's logits are in, item → its first row
    for items whose every row was kept)."""
    keep_all = {i for i, *_ in meta.extras.get("plp", ())} | set(meta.extras.get("spec", ()))  # spec: runtime/speculate.py
    rows, first, at = [], {}, 0
    for i, (n, smp) in enumerate(zip(meta.n_new, meta.sample)):
        kept = n if i in keep_all else int(smp)
        if i in keep_all:
            first[i] = at
        if smp:
            rows.append(at + kept - 1)
        at += kept
    return rows, first


def sample_rows(meta: StepMeta) -> list[int]:
    """Per sampled item, the row of the model's output its last position's logits are in."""
    return _rows_kept(meta)[0]


def keep_all_rows(meta: StepMeta) -> list[bool] | None:
    """Per item, whether all its rows go past the cut (prompt log-probabilities, a speculative
    round's verification); None: none do."""
    mine = {i for i, *_ in meta.extras.get("plp", ())} | set(meta.extras.get("spec", ()))
    if not mine:
        return None
    return [i in mine for i in range(len(meta.starts))]


def sample_step(
    y: torch.Tensor, meta: StepMeta, states: SamplingStates, to_host: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[list[int], list[int], list[int], torch.Tensor, torch.Tensor]:
    """The last stage's choice of each sampled row's token, and the log-probabilities asked for.

    Args:
        y: [R, V] logits of the rows kept past the cut (the sampled ones, and every row of the
            items computing prompt log-probabilities), on the stage's device.
        meta: the step (its extras say which rows return log-probabilities); `states.begin(meta)` ran.
        states: the stage's per-sequence sampling states.
        to_host: the backend's copy to the host.
    Returns:
        (items that sampled, positions of their tokens, the tokens or failure codes, and the
        log-probability records as RESULT meta int64 / samp float64: `decode_logprobs`).
    """
    items = [i for i, s in enumerate(meta.sample) if s]
    positions = [meta.starts[i] + meta.n_new[i] for i in items]
    params = [meta.sampling[i] for i in items]
    rows, first = _rows_kept(meta)
    raw = y if len(rows) == y.shape[0] else y[torch.tensor(rows, dtype=torch.long, device=y.device)]
    logits = raw
    stateful = [(r, states.seqs[meta.seq_ids[i]]) for r, i in enumerate(items) if meta.seq_ids[i] in states.seqs]
    if stateful:
        logits = raw.clone()  # the raw rows stay for the log-probabilities
        for r, st in stateful:
            st.apply(logits[r], positions[r])
    # greedy rows need only each row's maximum: taken where the logits are, not copied [S, V] to the host
    picked = sample(logits if all(p[0] <= GREEDY_TEMPERATURE for p in params) else to_host(logits), params, positions)
    for r, st in stateful:
        if st.failed is not None:  # its grammar cannot go on: the request ends with the reason (the worker's log)
            print(f"[hetc sampler] sequence {meta.seq_ids[items[r]]}: {st.failed}", file=sys.stderr, flush=True)
            picked[r] = GRAMMAR_ERROR
    # (row of y, position, token, k) for every log-probability returned
    want: list[tuple[int, int, int, int, int]] = []  # + the item
    lp = dict(meta.extras.get("lp", ()))
    for r, i in enumerate(items):
        if i in lp and picked[r] >= 0:
            want.append((i, rows[r], positions[r], picked[r], lp[i]))
    off = 0
    starts_tok = []
    for n in meta.n_new:
        starts_tok.append(off)
        off += n
    for i, k, nxt, n_prompt in meta.extras.get("plp", ()):
        s, n, t0 = meta.starts[i], meta.n_new[i], starts_tok[i]
        for j in range(n):
            if s + j + 1 >= n_prompt:
                break
            target = meta.token_ids[t0 + j + 1] if j + 1 < n else nxt
            want.append((i, first[i] + j, s + j + 1, target, k))
    return items, positions, picked, *encode_logprobs(y, want)


def encode_logprobs(y: torch.Tensor, want: list[tuple[int, int, int, int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability records of `want` (item, row of y, position, token, k) as RESULT meta
    [item, position, token, k, k top ids]... and samp [logprob, k top logprobs]..."""
    if not want:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64)
    dev = y.device
    ls = torch.log_softmax(y[torch.tensor([w[1] for w in want], dtype=torch.long, device=dev)].float(), dim=-1)  # [W, V]
    chosen = ls.gather(1, torch.tensor([[w[3]] for w in want], dtype=torch.long, device=dev))[:, 0].double().cpu().tolist()
    kmax = max(w[4] for w in want)
    values, indices = ls.topk(kmax, dim=-1) if kmax else (ls[:, :0], ls[:, :0].long())
    top_v, top_i = values.double().cpu().tolist(), indices.cpu().tolist()
    meta: list[int] = []
    samp: list[float] = []
    for w, c, tv, ti in zip(want, chosen, top_v, top_i):
        i, _, pos, tok, k = w
        meta += [i, pos, tok, k, *ti[:k]]
        samp += [c, *tv[:k]]
    return torch.tensor(meta, dtype=torch.long), torch.tensor(samp, dtype=torch.float64)


def decode_logprobs(meta: torch.Tensor, samp: torch.Tensor) -> list[tuple[int, int, Logprob]]:
    """RESULT's records: (item, position, Logprob) each."""
    m, s = meta.tolist(), samp.tolist()
    out, a, b = [], 0, 0
    while a < len(m):
        i, pos, tok, k = m[a : a + 4]
        out.append((i, pos, Logprob(tok, s[b], tuple(zip(m[a + 4 : a + 4 + k], s[b + 1 : b + 1 + k])))))
        a, b = a + 4 + k, b + 1 + k
    return out


# ---- the frontend ---------------------------------------------------------------------------


class LaneSampling:
    """A lane's record of the sampling states its last stage holds (seq id → the sequence's
    preemptions when set up: a preempted sequence's is set up again from its tokens)."""

    def __init__(self) -> None:
        self.held: dict[int, int] = {}

    def extras(self, items: list[BatchItem], running: Iterable) -> dict:
        """StepMeta.extras for a micro-batch of `items`; `running`: the lane's running sequences."""
        ex: dict = {}
        lp = [[i, it.seq.params.logprobs] for i, it in enumerate(items) if it.sample and it.seq.params.logprobs is not None]
        plp = []
        setup = []
        for i, it in enumerate(items):
            seq, p = it.seq, it.seq.params
            # prompt log-probabilities are complete once a token was generated (a recomputation needs none)
            if p.prompt_logprobs is not None and seq.num_generated == 0 and it.start + 1 < seq.num_prompt_tokens:
                end = it.start + it.n_new
                plp.append([i, p.prompt_logprobs, seq.token_ids[end] if end < seq.num_prompt_tokens else -1, seq.num_prompt_tokens])
            if p.stateful and (it.start == 0 or self.held.get(seq.seq_id) != seq.preemptions):
                stops = sorted(p.stop_token_ids | (frozenset() if p.ignore_eos else seq.eos_token_ids))
                rec = {
                    "n": seq.num_prompt_tokens,
                    "hist": seq.token_ids[: it.start],
                    "pres": p.presence_penalty,
                    "freq": p.frequency_penalty,
                    "rep": p.repetition_penalty,
                    "bias": [list(b) for b in p.logit_bias],
                    "min": p.min_tokens,
                    "stops": stops,
                }
                if p.grammar is not None:
                    rec["grammar"], rec["eos"] = p.grammar, sorted(seq.eos_token_ids)
                setup.append([i, rec])
                self.held[seq.seq_id] = seq.preemptions
        if self.held:
            live = {s.seq_id for s in running} | {it.seq.seq_id for it in items}
            gone = [sid for sid in self.held if sid not in live]
            for sid in gone:
                del self.held[sid]
            if gone:
                ex["release"] = gone
        for key, v in (("lp", lp), ("plp", plp), ("setup", setup)):
            if v:
                ex[key] = v
        return ex
