"""Capture: resolve MODEL, build it on the meta device, torch.export it, cut it into units.

MODEL is a catalog name (hardware_profiles/models/NAME.json), a Hugging Face model dir,
a Hugging Face id already in the local cache, `package.module:factory` returning
`(module, example_inputs)`, or a `.pt2` exported program. No weights are loaded.

A decoder stack repeats one block (or a short pattern of blocks, e.g. alternating
sliding/global attention): it is exported with three copies of the pattern, the middle
copy is checked against the last and repeated to the real depth — so a 126-layer model
exports like a 3-layer one. Models whose layers do not repeat regularly are exported whole.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import logging
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetc.cluster import PROFILE_DIR
from hetc.engine import EngineName, WindowKV, load_engine
from hetc.errors import BadInput, first_line
from hetc.kv_blocks import window_span
from hetc.partitioner.capture import capture_cache
from hetc.partitioner.capture.terms import DTYPE_BYTES, MODEL_DTYPES, MXFP4_BYTES, LatentAttention, OpGraph
from hetc.partitioner.capture.units import Unit, assign_layers, cut_units, replicate

if TYPE_CHECKING:  # torch loads only when a model is captured: a cached capture plans without it
    import torch

__all__ = ["CapturedModel", "capture", "catalog_names", "load_hf_config"]

# config keys that make layers differ in ways a short export would not show
_IRREGULAR = (
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "mlp_only_layers",
    "interleave_moe_layer_step",
    "no_rope_layers",
    "n_dense_layers",
)
_VOLATILE = ("transformers_version", "_name_or_path", "_hetc_source", "torch_dtype", "dtype", "architectures", "auto_map", "_commit_hash")


@dataclass(kw_only=True)
class CapturedModel:
    """What planning needs of a model: its units and their sizes."""

    ref: str
    kind: str  # catalog | hf-dir | hf-cache | factory | pt2
    dtype: str
    kv_dtype: str
    units: list[Unit]
    num_layers: int
    num_params: int
    config: dict[str, Any] | None = None
    exported_layers: int | None = None  # layers in the exported copy, when replicated
    notes: list[str] = field(default_factory=list)
    graph: OpGraph | None = None  # the exported sample's costed nodes
    packed: dict[str, float] = field(default_factory=dict)  # parameter (canonical name) -> bytes per element, where not `dtype`'s

    def count_params(self, params: dict[str, float]) -> int:
        """Elements of `params` (name -> bytes, as units hold them)."""
        return _count(params, self.dtype, self.packed)

    @property
    def param_bytes(self) -> float:
        seen: dict[str, float] = {}
        for u in self.units:
            seen.update(u.params)
        return sum(seen.values())

    @property
    def kv_bytes_per_token(self) -> float:
        return sum(u.kv_bytes_per_token for u in self.units)

    @property
    def graph_hash(self) -> str:
        cfg = {k: v for k, v in (self.config or {}).items() if k not in _VOLATILE}
        table = [(u.kind, u.layer, round(u.param_bytes), round(u.kv_bytes_per_token)) for u in self.units]
        doc = json.dumps({"config": cfg, "dtype": self.dtype, "kv_dtype": self.kv_dtype, "units": table}, sort_keys=True, default=str)
        return hashlib.sha256(doc.encode()).hexdigest()


def catalog_names() -> list[str]:
    return sorted(p.name[:-5] for p in (PROFILE_DIR / "models").iterdir() if p.name.endswith(".json"))


def _bad_model(ref: str, why: str) -> BadInput:
    return BadInput(
        f"cannot use model {ref!r}: {why}",
        field="MODEL",
        fix=f"give a catalog name ({', '.join(catalog_names())}), a Hugging Face model dir with "
        "config.json, a Hugging Face id in the local cache, package.module:factory, or a .pt2 file.",
    )


def supported_torch() -> str | None:
    """The torch releases hetc is built and tested against (its `torch` requirement's specifier, e.g.
    `>=2.11,<2.14`), if installed as a package."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        reqs = [Requirement(r) for r in metadata.requires("hetc") or []]
    except metadata.PackageNotFoundError:
        return None
    return next((str(r.specifier) for r in reqs if r.name == "torch" and not r.marker), None)


def _export_failed(ref: str, e: Exception) -> BadInput:
    """torch.export's refusal; under a torch outside hetc's supported range, that torch is the likely
    cause (seen: torch 2.11's export, before capture declared the token dim Dim.DYNAMIC)."""
    import torch
    from packaging.specifiers import SpecifierSet

    supported, here = supported_torch(), torch.__version__.split("+")[0]
    if supported and here not in SpecifierSet(supported):
        return BadInput(
            f"cannot use model {ref!r}: torch.export rejected it under torch {torch.__version__}, while "
            f"hetc is built and tested against torch {supported}: {first_line(e)}",
            field="MODEL",
            fix=f"install torch{supported} (the CUDA or ROCm build on a GPU host), or capture where it is "
            "installed: plans and the capture cache (HETC_CACHE_DIR) carry the units.",
        )
    return _bad_model(ref, f"torch.export rejected it: {first_line(e)}")


def load_hf_config(ref: str):
    """The transformers config for a catalog name, a model dir or a cached hub id; (config, kind)."""
    from transformers import AutoConfig

    catalog = Path(str(PROFILE_DIR / "models" / f"{ref}.json"))
    try:
        if catalog.is_file():
            d = json.loads(catalog.read_text())
            d.pop("_hetc_source", None)
            return AutoConfig.for_model(d.pop("model_type"), **d), "catalog"
        path = Path(ref)
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise _bad_model(ref, f"the directory {path} has no config.json.")
            return AutoConfig.from_pretrained(str(path), local_files_only=True), "hf-dir"
        if ref.count("/") == 1 and not path.exists():
            return AutoConfig.from_pretrained(ref, local_files_only=True), "hf-cache"
    except BadInput:
        raise
    except (OSError, ValueError, KeyError) as e:
        raise _bad_model(ref, f"its config could not be read ({str(e).splitlines()[0]}).") from None
    raise _bad_model(ref, "it is not a catalog name, a directory, a cached Hugging Face id, module:factory or .pt2.")


def _layer_pattern(cfg) -> tuple[int, int] | None:
    """(prefix, P): after `prefix` leading layers of their own (DeepSeek's `first_k_dense_replace`
    dense layers), every per-layer list in the config repeats with period P; None if irregular."""
    n = cfg.num_hidden_layers
    d = cfg.to_dict()
    prefix = d.get("first_k_dense_replace") or 0
    if not isinstance(prefix, int) or not 0 <= prefix < n:
        return None
    for k in _IRREGULAR:
        v = d.get(k)
        if k != "first_k_dense_replace" and v not in (None, 0, 1, [], False):
            return None
    period = 1
    for v in d.values():
        if isinstance(v, list) and len(v) == n and n > 1:
            p = next(p for p in range(1, n + 1) if all(v[i] == v[i % p] for i in range(n)))
            period = max(period, p)
    if prefix and period > 1:  # a per-layer list would have to repeat after the prefix, not from layer 0
        return None
    return prefix, period


def _with_layers(cfg, k: int):
    c = copy.deepcopy(cfg)
    n = cfg.num_hidden_layers
    for key, v in cfg.to_dict().items():
        if isinstance(v, list) and len(v) == n and n > 0:
            setattr(c, key, [v[i % n] for i in range(k)])
    c.num_hidden_layers = k
    return c


def _export_hf(cfg, dtype: str, ref: str) -> torch.export.ExportedProgram:
    import torch
    from torch.export import Dim, export
    from transformers import AutoModelForCausalLM

    from hetc.partitioner.capture.graph import TORCH_DTYPES

    tdtype = TORCH_DTYPES[dtype]
    model = None
    for impl in ("sdpa", "eager"):
        try:
            with torch.device("meta"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = AutoModelForCausalLM.from_config(cfg, dtype=tdtype, attn_implementation=impl)
            break
        except ValueError as e:
            if "not a" in str(e) or "Unrecognized configuration" in str(e):
                raise _bad_model(
                    ref,
                    f"transformers has no causal-LM class for it ({str(e).splitlines()[0]}); encoder-only and vision models go through package.module:factory.",
                ) from None
            err = e
    if model is None:
        raise _bad_model(ref, f"transformers could not build it ({str(err).splitlines()[0]}).")
    model.eval()
    max_pos = getattr(cfg, "max_position_embeddings", None) or 4096
    tokens = Dim.DYNAMIC(min=2, max=max(16, min(int(max_pos), 1 << 20)))
    ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return export(model, (), {"input_ids": ids, "use_cache": False}, dynamic_shapes={"input_ids": {1: tokens}, "use_cache": None}, strict=False)
    except Exception as e:  # torch.export raises many types; all mean "this model does not export"
        raise _export_failed(ref, e) from None


def _moe_info(cfg) -> dict | None:
    e = next((getattr(cfg, k) for k in ("num_local_experts", "num_experts", "n_routed_experts") if isinstance(getattr(cfg, k, None), int)), None)
    k = next((getattr(cfg, k) for k in ("num_experts_per_tok", "top_k", "moe_topk") if isinstance(getattr(cfg, k, None), int)), None)
    return {"num_experts": e, "top_k": k} if e and k else None


def _expert_weight_bytes(cfg) -> float | None:
    """Bytes per element of the experts' weights where the checkpoint packs them in a format of their
    own (its quantization_config: gpt-oss's MXFP4, which engines serve as stored); None: `--dtype`'s."""
    q = getattr(cfg, "quantization_config", None)
    method = q.get("quant_method") if isinstance(q, dict) else getattr(q, "quant_method", None)
    return MXFP4_BYTES if method == "mxfp4" else None


def _latent_kv(graph: OpGraph, cfg) -> OpGraph:
    """Multi-head latent attention (DeepSeek-V2/V3): what an engine caches per token and layer is the
    compressed latent and the shared rotary key, `kv_lora_rank + qk_rope_head_dim` elements (DeepSeek-V2
    paper, §2.1; vLLM's and SGLang's MLA backends) — not the per-head K and V that transformers' attention
    receives after the up-projection, `heads × (qk_nope + qk_rope + v_head_dim)`. Each attention node's
    KV bytes are scaled from the second to the first, and it keeps MLA's sizes (`OpNode.latent`) for the
    cost of its kernels' forms (analytic.py); other models pass through."""
    rank, rope = getattr(cfg, "kv_lora_rank", None), getattr(cfg, "qk_rope_head_dim", None)
    if not (isinstance(rank, int) and isinstance(rope, int)):
        return graph
    expanded = cfg.num_attention_heads * (cfg.qk_nope_head_dim + rope + cfg.v_head_dim)
    for node in graph.nodes:
        if node.kv_bytes_per_token:
            itemsize = node.kv_bytes_per_token / expanded  # the export's K and V: heads × (nope + rope + v) elements
            node.kv_bytes_per_token *= (rank + rope) / expanded
            node.latent = LatentAttention(cfg.num_attention_heads, rank, rope, cfg.qk_nope_head_dim, cfg.v_head_dim, itemsize)
    return graph


def _windows(units: list[Unit], cfg) -> list[Unit]:
    """Each attention unit's sliding window (`Unit.kv_window`) from the config (`layer_window`)."""
    from hetc.backends.decoder import layer_window

    windows = {u.layer: layer_window(cfg, u.layer) for u in units if u.kv_bytes_per_token}
    return [replace(u, kv_window=windows[u.layer]) if u.kv_bytes_per_token and windows[u.layer] else u for u in units]


def _finish(units: list[Unit], dtype: str, kv_dtype: str) -> list[Unit]:
    """Rescale K/V bytes from the export's dtype to the KV-cache dtype."""
    from hetc.partitioner.capture.graph import TORCH_DTYPES

    export_bytes = TORCH_DTYPES[dtype].itemsize
    k = DTYPE_BYTES[kv_dtype] / export_bytes
    return [replace(u, kv_bytes_per_token=u.kv_bytes_per_token * k) for u in units]


def _capture_hf(ref: str, dtype: str, kv_dtype: str) -> CapturedModel:
    from hetc.partitioner.capture.graph import build_graph

    cfg, kind = load_hf_config(ref)
    n = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(n, int) or n < 1:
        raise _bad_model(ref, "its config has no num_hidden_layers.")
    pattern = _layer_pattern(cfg)
    moe = _moe_info(cfg)
    notes: list[str] = []
    packed = _expert_weight_bytes(cfg) if moe else None
    if packed is not None:
        notes.append(f"experts stored as the checkpoint's MXFP4 ({packed * 8:.2f} bits per weight); the rest at {dtype}")
    units = None
    exported = n
    if pattern is not None and n > pattern[0] + 3 * pattern[1]:
        prefix, period = pattern
        exported = prefix + 3 * period
        graph = _latent_kv(build_graph(_export_hf(_with_layers(cfg, exported), dtype, ref), weight_dtype=dtype, moe=moe, expert_weight_bytes=packed), cfg)
        units = replicate(cut_units(graph), period, n, prefix)
        if units is None:
            notes.append(f"a {exported}-layer export did not repeat as the config says; exported all {n} layers")
            exported = n
    if units is None:
        graph = _latent_kv(build_graph(_export_hf(cfg, dtype, ref), weight_dtype=dtype, moe=moe, expert_weight_bytes=packed), cfg)
        units = assign_layers(cut_units(graph))
        if units is None:
            units = _unit_layers(cut_units(graph))
            notes.append("no attention found: one layer per unit")
    units = _windows(units, cfg)
    sliding = {u.layer: u.kv_window for u in units if u.kv_window}
    if sliding:
        w = max(sliding.values())
        keep = [e.value for e in EngineName if load_engine(e).sliding_windows.kv == WindowKV.WINDOW]
        notes.append(
            f"sliding-window attention on {len(sliding)} of {n} layers ({w} tokens): they keep at most their window "
            f"({window_span(w)} tokens in whole blocks) under engines that free the blocks behind it ({', '.join(keep)})"
        )
    return CapturedModel(
        ref=ref,
        kind=kind,
        dtype=dtype,
        kv_dtype=kv_dtype,
        units=_finish(units, dtype, kv_dtype),
        num_layers=max(u.layer for u in units) + 1,
        num_params=_count_params(units, dtype, graph.packed),
        config=cfg.to_dict(),
        exported_layers=exported if exported != n else None,
        notes=notes,
        graph=graph,
        packed=graph.packed,
    )


def _unit_layers(units: list[Unit]) -> list[Unit]:
    return [replace(u, layer=u.index) for u in units]


def _count(params: dict[str, float], dtype: str, packed: dict[str, float]) -> int:
    """Elements of `params` (name -> bytes; replicated layers' names are `L{layer}/NAME`)."""
    wbytes = DTYPE_BYTES[dtype]
    return int(round(sum(b / packed.get(name.rsplit("/", 1)[-1], wbytes) for name, b in params.items())))


def _count_params(units: list[Unit], dtype: str, packed: dict[str, float] | None = None) -> int:
    seen: dict[str, float] = {}
    for u in units:
        seen.update(u.params)
    return _count(seen, dtype, packed or {})


def _capture_program(ep, ref: str, kind: str, dtype: str, kv_dtype: str) -> CapturedModel:
    from hetc.partitioner.capture.graph import build_graph

    graph = build_graph(ep, weight_dtype=dtype)
    units = assign_layers(cut_units(graph))
    notes = []
    if units is None:
        units = _unit_layers(cut_units(graph))
        notes.append("no attention found: one layer per unit")
    return CapturedModel(
        ref=ref,
        kind=kind,
        dtype=dtype,
        kv_dtype=kv_dtype,
        units=_finish(units, dtype, kv_dtype),
        num_layers=max(u.layer for u in units) + 1,
        num_params=_count_params(units, dtype),
        notes=notes,
        graph=graph,
    )


def _capture_factory(ref: str, dtype: str, kv_dtype: str) -> CapturedModel:
    import torch
    from torch.export import Dim, export

    mod_name, _, fn_name = ref.partition(":")
    sys.path.insert(0, str(Path.cwd()))
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
        made = fn()
    except (ImportError, AttributeError) as e:
        raise _bad_model(ref, f"cannot import {fn_name} from {mod_name} ({e}).") from None
    finally:
        sys.path.pop(0)
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise _bad_model(ref, "the factory must return (nn.Module, example_inputs).")
    module, example = made
    example = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    module.eval()
    # token ids [B, S]: the sequence is the token dimension; anything else: the batch
    tokens, batch = Dim("tokens", min=2, max=1 << 16), Dim("batch", min=2, max=1 << 16)
    dyn = tuple(
        ({1: tokens} if x.dim() == 2 and not x.is_floating_point() else {0: batch}) if isinstance(x, torch.Tensor) and x.dim() > 0 else None for x in example
    )
    try:
        try:
            ep = export(module, example, dynamic_shapes=dyn, strict=False)
        except Exception:  # a batch-specialized model: export it with its example shape
            ep = export(module, example, strict=False)
    except Exception as e:
        raise _export_failed(ref, e) from None
    return _capture_program(ep, ref, "factory", dtype, kv_dtype)


def capture(ref: str, *, dtype: str = "bf16", kv_dtype: str | None = None, cache: bool = True) -> CapturedModel:
    """Resolve, build on meta, export and cut MODEL into units (or read them from the capture cache).

    Args:
        ref: the MODEL argument of the CLI.
        dtype: weight dtype (bf16, fp16, fp8, fp32); fp8 is exported in bf16 with 1-byte weights.
        kv_dtype: KV-cache dtype; defaults to `dtype`.
        cache: read and write the on-disk capture cache (capture_cache.py).

    Raises:
        BadInput: unknown model, unreadable config, or an export failure (with the reason).
    """
    if dtype not in MODEL_DTYPES:
        raise BadInput(f"unknown dtype {dtype!r}.", field="--dtype", fix="use bf16, fp16, fp8 or fp32.")
    kv_dtype = kv_dtype or dtype
    if kv_dtype not in MODEL_DTYPES:
        raise BadInput(f"unknown dtype {kv_dtype!r}.", field="--kv-dtype", fix="use bf16, fp16, fp8 or fp32.")
    key = capture_cache.cache_key(ref, dtype, kv_dtype) if cache else None
    if key is not None and (hit := capture_cache.load(key)) is not None:
        return hit
    model = _capture(ref, dtype, kv_dtype)
    if key is not None:
        capture_cache.store(key, model)
    return model


def _capture(ref: str, dtype: str, kv_dtype: str) -> CapturedModel:
    import torch

    logging.getLogger("transformers").setLevel(logging.ERROR)
    if ref.endswith(".pt2"):
        if not Path(ref).is_file():
            raise _bad_model(ref, "file not found.")
        try:
            ep = torch.export.load(ref)
        except Exception as e:
            raise _bad_model(ref, f"not a readable exported program ({first_line(e)}).") from None
        return _capture_program(ep, ref, "pt2", dtype, kv_dtype)
    if ":" in ref and not Path(ref).exists():
        return _capture_factory(ref, dtype, kv_dtype)
    return _capture_hf(ref, dtype, kv_dtype)
