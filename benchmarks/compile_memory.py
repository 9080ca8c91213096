"""Host memory of `hetc compile`: peak resident memory of compiling a 2-stage plan, per toolchain,
against the stage's weight bytes, for this checkout and a baseline commit side by side.

    .venv/bin/python benchmarks/compile_memory.py [--baseline main] [--toolchains openvino,onnx,iree,inductor]
        [--weights model,random] [--layers 16 --hidden 2048 ...] [--dtype bf16] [--checks on,off] [--keep DIR]

A Llama-shaped model (default: 16 layers × 1536, 0.5 B parameters, 1.9 GiB at fp32) with random weights is saved as safetensors
in a temporary folder (written one tensor at a time); `hetc plan` cuts it into two stages over two
devices of each vendor (Intel: OpenVINO, AMD: IREE, NVIDIA: Inductor; ONNX on the Intel plan). Each
(checkout, toolchain, weights) runs `compile_plan(..., only=(toolchain,))` in a fresh process, with
the checkout's own hetc put first on the import path; this process polls the child's
/proc/PID/status every few milliseconds. Reported per run, as growth over the child's memory just
before `compile_plan` (every toolchain already imported):
  - anon: RssAnon (private memory: what the kernel cannot drop without swap), the headline figure;
  - + subprocesses: the peak of anon plus the RssAnon of the processes it started (iree-compile, the
    C++ compiler of AOTInductor), polled together;
  - file: RssFile (file pages mapped: the safetensors, the artifacts read back; the kernel can drop
    them under pressure);
  - hwm: VmHWM, the kernel's own peak of the whole resident set (anon + file + shmem);
in MiB and as a multiple of the largest stage's weight bytes. The baseline checkout is exported
with `git archive` into a temporary folder (nothing in the repository changes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.conftest's profile template
VENDORS = {
    "openvino": ("intel", "openvino", "GPU"),
    "onnx": ("intel", "openvino", "GPU"),
    "iree": ("amd", "rocm", "gfx942"),
    "inductor": ("nvidia", "cuda", "sm_90"),
}
_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")

# the child: the checkout at ROOT first on the import path (its pyproject's package-dir), then
# every toolchain imported, the memory before compiling printed, then one compile
_CHILD = r"""
import importlib.abc, importlib.util, json, sys, tomllib
root = sys.argv[1]
dirs = tomllib.load(open(root + "/pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"]

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        pkg, _, leaf = name.rpartition(".")
        if name in dirs:
            d = f"{root}/{dirs[name]}"
            return importlib.util.spec_from_file_location(name, d + "/__init__.py", submodule_search_locations=[d])
        if pkg in dirs:
            base = f"{root}/{dirs[pkg]}/{leaf}"
            import os
            if os.path.isfile(base + ".py"):
                return importlib.util.spec_from_file_location(name, base + ".py")
        return None

sys.meta_path.insert(0, Finder())
import warnings; warnings.simplefilter("ignore")
import torch, openvino, onnx, onnxscript, onnxruntime, iree.compiler, iree.runtime, torch_mlir, torch._inductor
import hetc.runtime.compile as hc
assert hc.__file__.startswith(root), hc.__file__

def status():
    return {k: int(v.split()[0]) for k, v in (l.split(":", 1) for l in open("/proc/self/status")) if k in
            ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")}

plan, out, model, random, check, only = sys.argv[2:8]
print("BEFORE " + json.dumps(status()), flush=True)
t0 = __import__("time").perf_counter()
m = hc.compile_plan(hc.CompileOptions(plan=plan, out_dir=out, model_dir=model, random_weights=random == "1",
                                      check=check == "1", only=(only,)))
arts = [a for s in m["stages"] for a in s["artifacts"] if a["toolchain"] == only]
print("AFTER " + json.dumps(status() | {"s": __import__("time").perf_counter() - t0,
      "built": [a["built"] for a in arts], "reasons": [a.get("reason") for a in arts],
      "checks": [a.get("check", {}) for a in arts]}), flush=True)
"""


def _status(pid: int) -> dict[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in text.splitlines() if ":" in ln) if k in _FIELDS}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descendants(pid: int) -> list[int]:
    """The programs `pid` started, and theirs (iree-compile, the C++ compiler), from /proc. A child
    still running `pid`'s command is a fork about to exec: its RssAnon is the pages it shares with
    `pid` copy-on-write, already counted."""
    out, todo, own = [], [pid], _cmdline(pid)
    while todo:
        p = todo.pop()
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(c) for c in (t / "children").read_text().split()]
            except OSError:
                continue
            out += [k for k in kids if _cmdline(k) not in (own, b"")]
            todo += kids
    return out


def run_child(root: Path, plan: Path, out: Path, model: Path, random: bool, check: bool, only: str) -> dict:
    """One compile in a fresh process; the peaks (KiB) of its memory after the BEFORE line, and
    `tree_anon`, the peak of its RssAnon plus its subprocesses' (each polled at the same time)."""
    p = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root), str(plan), str(out), str(model), "1" if random else "0", "1" if check else "0", only],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
    )
    peak: dict[str, int] = {}
    started = threading.Event()
    lines: list[str] = []

    def read() -> None:
        for ln in p.stdout:  # type: ignore[union-attr]
            lines.append(ln)
            if ln.startswith("BEFORE"):
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while p.poll() is None:
        if started.is_set() and (s := _status(p.pid)):
            for k, v in s.items():
                peak[k] = max(peak.get(k, 0), v)
            kids = [_status(c) for c in _descendants(p.pid)]
            tree = s.get("RssAnon", 0) + sum(k.get("RssAnon", 0) for k in kids if k)
            peak["tree_anon"] = max(peak.get("tree_anon", 0), tree)
        time.sleep(0.005)
    reader.join()
    err = p.stderr.read()  # type: ignore[union-attr]
    before = next((json.loads(ln[7:]) for ln in lines if ln.startswith("BEFORE")), None)
    after = next((json.loads(ln[6:]) for ln in lines if ln.startswith("AFTER")), None)
    if p.returncode or before is None or after is None:
        raise RuntimeError(f"compile of {only} at {root} failed ({p.returncode}): {err[-2000:]}")
    peak["VmHWM"] = max(peak.get("VmHWM", 0), after["VmHWM"])
    return {"before": before, "peak": peak, "after": after}


def write_model(d: Path, a: argparse.Namespace) -> dict[str, int]:
    """config.json and model.safetensors (random, written one tensor at a time); bytes per weight."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from hetc.partitioner.capture.graph import TORCH_DTYPES
    from hetc.weights import RandomWeights, write_safetensors

    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        torch_dtype=a.dtype_name,
    )
    cfg.save_pretrained(d)
    with torch.device("meta"):
        m = LlamaForCausalLM(cfg)
    dtype = TORCH_DTYPES[a.dtype]
    specs = [(n, p.shape, dtype) for n, p in m.named_parameters()]
    # 8-byte aligned, as `safetensors` (save_pretrained) writes them: not IREE's 64 (see hetc.weights.DATA_ALIGNMENT)
    write_safetensors(d / "model.safetensors", specs, RandomWeights(std=0.02).get, align=8)
    return {n: p.numel() * dtype.itemsize for n, p in m.named_parameters()}


def write_plans(d: Path, model: Path, model_bytes: int, a: argparse.Namespace) -> dict[str, Path]:
    """One 2-stage plan per vendor: two devices that each hold a bit more than half the model."""
    from tests.conftest import PROFILE  # the tests' profile template (made-up figures)

    plans = {}
    for vendor, backend, target in {v for v in VENDORS.values()}:
        profile = PROFILE.format(
            name=f"{vendor}-dev", vendor=vendor, backend=backend, memory=f"{int(model_bytes * 0.75)} B", bw="1000 GB/s", flops="50 TFLOP/s"
        )
        (d / f"{vendor}.yaml").write_text(profile.replace(f"backend: {backend}\n", f"backend: {backend}\ntarget: {target}\n"))
        (d / f"{vendor}-cluster.yaml").write_text(
            f"nodes:\n  - {{name: n, device: ./{vendor}.yaml, count: 2, link: pcie4}}\nnetwork: {{default: ethernet-10g}}\n"
        )
        plan = d / f"{vendor}-plan.json"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "hetc.cli",
                "plan",
                "--profiles",
                str(d / f"{vendor}-cluster.yaml"),
                str(model),
                "--dtype",
                a.dtype,
                "--input-len",
                "128",
                "--output-len",
                "32",
                "--disaggregate",
                "off",
                "--time-limit",
                "5",
                "-o",
                str(plan),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        if r.returncode:
            raise RuntimeError(f"hetc plan failed: {r.stderr[-2000:]}")
        plans[vendor] = plan
    return plans


def stage_bytes(plan: Path, weight_bytes: dict[str, int]) -> list[int]:
    """Each stage's weight bytes, from the plan's cuts (units → the layers' weights)."""
    doc = json.loads(plan.read_text())
    units = doc["units"]
    out = []
    for p in doc["pipelines"]:
        for st in p["stages"]:
            first, last = st["units"]
            total = 0
            for u in units[first : last + 1]:
                kind, layer = u["kind"], u.get("layer")
                prefix = {
                    "embed": ["model.embed_tokens."],
                    "norm": ["model.norm."],
                    "head": ["lm_head."],
                    "attention": [f"model.layers.{layer}.self_attn.", f"model.layers.{layer}.input_layernorm."],
                    "mlp": [f"model.layers.{layer}.mlp.", f"model.layers.{layer}.post_attention_layernorm."],
                }[kind]
                total += sum(b for n, b in weight_bytes.items() if any(n.startswith(x) for x in prefix))
            out.append(total)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="main", help="git ref compared with this checkout ('' for none)")
    ap.add_argument("--toolchains", default="openvino,onnx,iree,inductor")
    ap.add_argument("--weights", default="model,random", help="model (--model-dir), random (--random-weights)")
    ap.add_argument("--checks", default="on", help="on (the CLI's default), off (--no-check), or on,off")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--intermediate", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument(
        "--dtype", default="fp32", choices=("bf16", "fp32"), help="the plan's dtype and the stored one (fp32: every CPU check runs; bf16 ones cannot)"
    )
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="write the model and plans here once and keep them (a multi-GB model is minutes to write); later runs with the same folder and shape reuse them",
    )
    a = ap.parse_args()
    a.dtype_name = {"bf16": "bfloat16", "fp32": "float32"}[a.dtype]
    tmp = Path(tempfile.mkdtemp(prefix="hetc-compile-memory-"))
    try:
        work = a.keep or tmp
        model = work / "model"
        model.mkdir(parents=True, exist_ok=True)
        done = work / "weights.json"  # written last: the model and plans are whole
        shape = {k: getattr(a, k) for k in ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab", "dtype")}
        if done.exists() and json.loads(done.read_text())["shape"] == shape:
            wb = json.loads(done.read_text())["bytes"]
            plans = {v: work / f"{v}-plan.json" for v, _, _ in VENDORS.values()}
        else:
            done.unlink(missing_ok=True)
            wb = write_model(model, a)
            plans = write_plans(work, model, sum(wb.values()), a)
            done.write_text(json.dumps({"shape": shape, "bytes": wb}))
        total = sum(wb.values())
        trees = [("this checkout", REPO)]
        if a.baseline:
            base = tmp / "baseline"
            base.mkdir()
            commit = subprocess.run(["git", "rev-parse", "--short", a.baseline], capture_output=True, text=True, cwd=REPO, check=True).stdout.strip()
            subprocess.run(f"git archive {commit} | tar -x -C {base}", shell=True, check=True, cwd=REPO)
            trees.insert(0, (f"{a.baseline} ({commit})", base))
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
        print(
            f"model: {a.layers} layers × {a.hidden} wide, {a.dtype}, {total / 2**20:.0f} MiB of weights; HEAD {head.strip()}; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        print(
            "| toolchain | check | weights | stage weights MiB | checkout | anon MiB (× stage) | + subprocesses MiB (× stage) "
            "| file MiB | hwm MiB (× stage) | s | max check diff |\n|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
            flush=True,
        )
        for only in a.toolchains.split(","):
            plan = plans[VENDORS[only][0]]
            biggest = max(stage_bytes(plan, wb))
            for check, weights, (label, root) in itertools.product(a.checks.split(","), a.weights.split(","), trees):
                out = tmp / "out"
                subprocess.run(["rm", "-rf", str(out)], check=True)
                r = run_child(root, plan, out, model, weights == "random", check == "on", only)
                b, pk = r["before"], r["peak"]
                anon, file = ((pk.get(k, 0) - b[k]) / 1024 for k in ("RssAnon", "RssFile"))
                tree = (pk.get("tree_anon", 0) - b["RssAnon"]) / 1024
                hwm = (pk["VmHWM"] - b["VmRSS"]) / 1024
                checks = r["after"]["checks"]
                diffs = [max(c["max_abs_diff"].values()) for c in checks if c.get("ran")]
                sb = biggest / 2**20
                tail = f"{max(diffs):.2e}" if diffs else "—"
                print(
                    f"| {only} | {check} | {weights} | {sb:.0f} | {label} | {anon:.0f} ({anon / sb:.2f}) | "
                    f"{tree:.0f} ({tree / sb:.2f}) | {file:.0f} | {hwm:.0f} ({hwm / sb:.2f}) | {r['after']['s']:.0f} "
                    f"| {tail} |",
                    flush=True,
                )
                for c in checks:
                    if c and not c.get("ok", False):
                        print(f"  check: {c.get('reason') or c}", flush=True)
                if not all(r["after"]["built"]):
                    print(f"  not built: {r['after']['reasons']}", flush=True)
    finally:
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
