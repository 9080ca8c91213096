"""Where a stage's parameters come from: the model dir's safetensors (memory-mapped, only
the tensors asked for) or a deterministic random initialization (`--random-weights`)."""

from __future__ import annotations

import json
import mmap
import struct
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from hetc.errors import BadInput

__all__ = [
    "DATA_ALIGNMENT",
    "MetaWeights",
    "RandomWeights",
    "SafetensorsWeights",
    "WeightSpec",
    "has_weights",
    "mapped_weights",
    "stage_weights",
    "write_safetensors",
]

WeightSpec = tuple[str, torch.Size, torch.dtype]  # a weight's model name, shape and the dtype a stage takes

_ST_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}

_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


# where a written file's tensor data starts: IREE's host buffer alignment (IREE_HAL_HEAP_BUFFER_ALIGNMENT), below
# which its CPU device copies a parameter instead of importing the mapped bytes in place
DATA_ALIGNMENT = 64


def write_safetensors(
    path: str | Path, specs: Iterable[WeightSpec], make: Callable[[str, torch.Size, torch.dtype], torch.Tensor], *, align: int = DATA_ALIGNMENT
) -> int:
    """Write a safetensors file one tensor at a time: only the tensor being written is in memory.

    Args:
        path: the file to write.
        specs: (name, shape, dtype) of every tensor, in file order (the header is written first).
        make: `make(name, shape, dtype)` gives the tensor's values when its turn comes.
        align: the data starts at a multiple of this many bytes (the header padded with spaces), and so
            does every tensor after tensors whose sizes are multiples of it (8: what `safetensors` writes).

    Returns:
        The bytes of tensor data written.
    """
    specs = list(specs)
    header, offset = {}, 0
    for name, shape, dtype in specs:
        n = dtype.itemsize
        for d in shape:
            n *= d
        header[name] = {"dtype": _ST_NAMES[dtype], "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % align)  # every tensor maps as a view
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape, dtype in specs:
            t = make(name, shape, dtype).to(dtype).contiguous()
            f.write(t.reshape(-1).view(torch.uint8).numpy().data)
            del t
    return offset


def has_weights(model_dir: str | Path) -> bool:
    d = Path(model_dir)
    return d.is_dir() and any(d.glob("*.safetensors"))


class SafetensorsWeights:
    """Tensors of a Hugging Face model dir by name, read through mmap.

    Only the header of each file is parsed up front; a tensor's bytes are mapped when it
    is asked for, so a worker touches the pages of its own stage's tensors and no others.
    """

    def __init__(self, model_dir: str | Path, aliases: dict[str, str] | None = None):
        """Args:
        model_dir: directory with *.safetensors (and model.safetensors.index.json when sharded).
        aliases: name → name to read instead when the first is absent (tied embeddings).
        """
        self.dir = Path(model_dir)
        self.aliases = aliases or {}
        files = sorted(self.dir.glob("*.safetensors"))
        if not files:
            raise BadInput(
                f"no *.safetensors in {self.dir}.",
                field="--model-dir",
                fix="save the model with save_pretrained(safe_serialization=True), or pass --random-weights.",
            )
        self._where: dict[str, tuple[Path, str, list[int], int, int]] = {}
        self._maps: dict[Path, mmap.mmap] = {}
        for f in files:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            base = 8 + n
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                b, e = info["data_offsets"]
                self._where[name] = (f, info["dtype"], info["shape"], base + b, e - b)

    def names(self) -> set[str]:
        return set(self._where)

    def _map(self, f: Path) -> mmap.mmap:
        if f not in self._maps:
            with open(f, "rb") as fh:  # private copy-on-write map: torch may view it as writable
                self._maps[f] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        return self._maps[f]

    def _key(self, name: str) -> str:
        return name if name in self._where else self.aliases.get(name, name)

    def maps(self, name: str, dtype: torch.dtype, align: int = 1) -> bool:
        """Whether `get(name, ..., dtype)` is a view of the mapped file (stored in `dtype`), not a copy,
        starting at a multiple of `align` bytes (the map starts at a page: a file offset's alignment
        is the address's, up to the page size)."""
        where = self._where.get(self._key(name))
        return where is not None and _ST_DTYPES[where[1]] == dtype and where[3] % max(dtype.itemsize, align) == 0

    def get(self, name: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """The tensor `name` as `dtype` (a view of the mapped file when the dtype matches)."""
        key = self._key(name)
        if key not in self._where:
            raise BadInput(
                f"tensor {name!r} is not in the safetensors of {self.dir}.",
                field="--model-dir",
                fix="point --model-dir at the weights of the model the plan was made for.",
            )
        f, st_dtype, st_shape, offset, nbytes = self._where[key]
        if tuple(st_shape) != tuple(shape):
            raise BadInput(
                f"tensor {key!r} has shape {tuple(st_shape)} in {f.name}, the model config says {tuple(shape)}.",
                field="--model-dir",
                fix="use the weights that go with config.json.",
            )
        tdtype = _ST_DTYPES[st_dtype]
        count = nbytes // tdtype.itemsize
        try:
            t = torch.frombuffer(self._map(f), dtype=tdtype, count=count, offset=offset).view(st_shape)
        except (ValueError, RuntimeError):  # unaligned offset: read a copy instead
            with open(f, "rb") as fh:
                fh.seek(offset)
                t = torch.frombuffer(bytearray(fh.read(nbytes)), dtype=tdtype).view(st_shape)
        return t if tdtype == dtype else t.to(dtype)


class RandomWeights:
    """Deterministic random parameters: the same name gives the same tensor in every process that
    draws on the same kind of device. `device`: where they are drawn — a GPU stage's own device, as
    the host draws ~40 M values a second per tensor (a 30B model's weights took minutes there) where
    the GPU's generator takes seconds; the values differ from the host's (another generator)."""

    def __init__(self, std: float = 0.02, seed: int = 0, device: torch.device | str = "cpu"):
        self.std, self.seed, self.device = std, seed, torch.device(device)

    def get(self, name: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        g = torch.Generator(device=self.device).manual_seed(zlib.crc32(name.encode()) ^ self.seed)
        if len(shape) == 1:  # norm gains start at one, biases at zero
            return (torch.zeros if name.endswith("bias") else torch.ones)(shape, dtype=dtype, device=self.device)
        return torch.empty(shape, dtype=torch.float32, device=self.device).normal_(0.0, self.std, generator=g).to(dtype)


class MetaWeights:
    """Weights of the right shapes and no data (the meta device): a stage's layout and sizes only."""

    def get(self, name: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")


def stage_weights(hf_cfg, model_dir: str | None):
    """What a stage's parameters are read from: the model's safetensors (the LM head aliased to
    the embedding where the model ties them), or seeded random weights when `model_dir` is None."""
    if model_dir is None:
        return RandomWeights(std=getattr(hf_cfg, "initializer_range", 0.02))
    aliases = {"lm_head.weight": "model.embed_tokens.weight"} if getattr(hf_cfg, "tie_word_embeddings", False) else {}
    return SafetensorsWeights(model_dir, aliases)


def mapped_weights(weights, specs: Iterable[WeightSpec], folder: Path, *, align: int = 1):
    """`weights` for the tensors of `specs` as views of a mapped file: the model's own safetensors
    when each is stored in the dtype asked for (at a multiple of `align` bytes), else
    `folder/weights.safetensors`, written one tensor at a time (seeded random weights drawn, or
    stored ones converted or realigned) with its data `DATA_ALIGNMENT`-aligned.

    So a stage that holds all of them costs file pages, which the kernel can drop, not private
    memory. The caller removes `folder` when done (a mapping outlives the unlinked file).

    Args:
        weights: a SafetensorsWeights or RandomWeights.
        specs: (model name, shape, dtype) of the tensors that will be asked for.
        folder: where the file goes when one is needed (created).
        align: the alignment the caller needs of the model's own file (≤ DATA_ALIGNMENT).
    """
    specs = list({name: (name, shape, dtype) for name, shape, dtype in specs}.values())
    if isinstance(weights, SafetensorsWeights) and all(weights.maps(n, d, align) for n, _, d in specs):
        return weights
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "weights.safetensors", specs, weights.get)
    return SafetensorsWeights(folder)
