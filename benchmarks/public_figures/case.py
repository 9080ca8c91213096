"""One public figure's record (Case) and the engine it is predicted with: the engine each source names
(SOURCE_ENGINE), hetc's engine for it (HETC_ENGINE; STAND_INS where the named engine has no entry of its own);
and the MLPerf Llama-2-70B lengths the MLPerf rows run at."""

from __future__ import annotations

from dataclasses import dataclass

from public_figures.freeze import HELD_ROUNDS

# The engine each source's figures were measured with, as the source names it (MLPerf rows: NVIDIA's
# submissions run TensorRT-LLM, AMD's vLLM; a row's note overrides where it names another).
SOURCE_ENGINE = {
    **dict.fromkeys(("trt17", "trt10", "trt12", "mlperf40nv", "trt09"), "TensorRT-LLM"),
    **dict.fromkeys(("oci", "rocm25", "rocm25b", "gaudi3vllm", "krai60", "rocmvllm", "amd0715", "oci10"), "vLLM"),
    **dict.fromkeys(("gaudi", "gaudi2b", "gaudi2c", "gaudi2d", "gaudi3", "gaudi3b", "gaudi3c", "gaudi120", "ohci", "gaudi116"), "optimum-habana"),
    "mlperf40": "TGI-Gaudi",
}
# hetc's engine (hetc/engine.py) whose figures a named engine is predicted with. optimum-habana,
# TGI-Gaudi and MangoBoost's LLMBoost have no entry of their own: vLLM's figures stand in (on Gaudi the
# profile's HPU graphs for every step, as run_generation --use_hpu_graphs and TGI-Gaudi's warm-up
# record them; LLMBoost serves the same AMD MLPerf task as AMD's vLLM code), and the tables mark them.
STAND_INS = ("optimum-habana", "TGI-Gaudi", "LLMBoost")
HETC_ENGINE = {"TensorRT-LLM": "trtllm", "vLLM": "vllm", "SGLang": "sglang", **dict.fromkeys(STAND_INS, "vllm")}

# MLPerf Llama-2-70B offline workload: dataset statistics, see MLPERF_LENGTHS
MLPERF_ISL, MLPERF_OSL = 222, 294
MLPERF_LENGTHS = (
    "MLPerf Llama-2-70B lengths: input 222 = mean tok_input_length of the 24,576 OpenOrca samples "
    "(open_orca_gpt4_tokenized_llama.sampled_24576, per-sample lengths as extracted in "
    "openshift-psap/performance-dashboard mlperf-data/summaries/llama2-70b-99.csv @ 71007029; median "
    "152, max 1021); output 294 = 'Tokens per sample: 294.45' of mlcommons/inference "
    "language/llama2-70b/README.md (each run's tokens/s ÷ samples/s gives 290–301); prompts vary in "
    "length, hetc models them at their means"
)


@dataclass(frozen=True, slots=True)
class Case:
    """One public figure and the configuration it was measured at."""

    name: str
    cluster: str  # benchmarks/public_gpu/<cluster>.yaml: one node of the run's devices
    model: str  # a catalog name (hardware_profiles/models)
    dtype: str
    isl: int
    osl: int
    public: float  # output tok/s of the whole system
    source: str  # a SOURCES key
    vendor: str  # nvidia | amd | intel
    placement: str  # the run's parallelism as a --placement SPEC
    batch: int | None  # the run's batch (or the engine's cap on running sequences); None: the best that fits
    round: int  # 1: the first comparison; 2, 3, 4, 5 + 6: after the freezes at 11b21d7, 48fca1d, fd4908c, 005d8e2; 7: FROZEN; 8-12: FROZEN_BY_ROUND
    note: str = ""
    kv_dtype: str | None = None  # the run's KV-cache dtype where it is not the weights' (hetc's default)
    hold: bool = True  # False: gathered in a held round but reported beside, by a rule stated with its source

    @property
    def named_engine(self) -> str:
        """The engine the source names for this figure (SOURCE_ENGINE, or the row's note)."""
        for name in ("LLMBoost", "SGLang", "TensorRT-LLM", "vLLM"):
            if name in self.note or (name == "TensorRT-LLM" and "TRT-LLM" in self.note):
                return name
        return SOURCE_ENGINE.get(self.source) or {"nvidia": "TensorRT-LLM", "amd": "vLLM"}[self.vendor]

    @property
    def engine(self) -> str:
        """hetc's `--engine` for this figure (HETC_ENGINE: a stand-in where the named engine has no entry)."""
        return HETC_ENGINE[self.named_engine]

    @property
    def held(self) -> bool:
        """Gathered after its round's freeze (FROZEN_BY_ROUND) and not set aside by its round's rule: held to the target."""
        return self.round in HELD_ROUNDS and self.hold
