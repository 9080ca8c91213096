"""`hetc serve` on a real CUDA device (no --emulate): correctness and predicted vs measured steps.

    # here (plans need ortools, which the GPU host lacks): the tiny model and the plans
    python benchmarks/gpu_serve.py prepare WORK
    # on the GPU host, hetc importable:
    python benchmarks/gpu_serve.py check WORK -o result.json

`prepare` writes WORK/tiny (the serve tests' 4-layer Llama, random fp32 weights, its BPE tokenizer),
WORK/tiny-plan.json (fp32, one h100-sxm), and for llama-3.1-8b (random bf16 weights, 512-token
prompts, 128 output tokens) two plans per batch on one H100: with the catalog profile
(`h100-sxm`: engine fusion, CUDA-graph decode) and with `h100-eager.yaml`, the same profile
with `execution: {fusion: none, graphs: none}` — what hetc's cuda stages run today (torch eager).

`check` serves the tiny plan on the GPU and compares greedy completions of concurrent requests
with transformers' `generate` on the same GPU (token-identical expected: fp32, TF32 off); then
serves each 8B plan with `--random-weights`, sends `batch` requests at once and reads the mean
decode step from /metrics beside each plan's `predicted_ms.decode`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

try:
    import httpx
except ImportError:  # this repo's venv has the openai client's fork
    import httpx2 as httpx  # type: ignore[no-redef]

from serve_wait import wait_healthy  # noqa: E402  this directory: run as a script

REPO = Path(__file__).resolve().parents[1]
BATCHES = (8, 32)
PROMPT, OUTPUT = 512, 128
TEXTS = ["the quick brown fox jumps over the lazy dog", "hello world, this is hetc serving a tiny llama",
         "pipelines stream activations from stage to stage", "paged kv cache with blocks of sixteen tokens"]


def _hetc(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "hetc.cli", *args], cwd=REPO, check=True)


def prepare(work: Path) -> None:
    sys.path.insert(0, str(REPO))
    from tests.fixtures.serving import build_model

    work.mkdir(parents=True, exist_ok=True)
    if not (work / "tiny" / "config.json").exists():
        build_model(work / "tiny")
    cluster = work / "one-h100.yaml"
    cluster.write_text("name: one-h100\nnodes:\n  - {name: a, device: h100-sxm, count: 1}\n")
    eager_prof = work / "h100-eager.yaml"
    import yaml

    prof = yaml.safe_load((REPO / "hardware_profiles" / "h100-sxm.yaml").read_text())
    prof["name"] = "h100-eager"
    prof["execution"] = {"fusion": "none", "graphs": "none"}
    prof["sources"] = [*prof["sources"], "execution: torch eager (what hetc's cuda stages run today), set by hand"]
    eager_prof.write_text(yaml.safe_dump(prof, sort_keys=False))
    eager = work / "one-h100-eager.yaml"
    eager.write_text(f"name: one-h100-eager\nnodes:\n  - {{name: a, device: {eager_prof}, count: 1}}\n")
    _hetc("plan", "--profiles", str(cluster), str(work / "tiny"), "--dtype", "fp32", "--placement", "a:0",
          "-o", str(work / "tiny-plan.json"))
    _capture_entries(work)
    for b in BATCHES:
        for name, c in (("catalog", cluster), ("eager", eager)):
            _hetc("plan", "--profiles", str(c), "llama-3.1-8b", "--placement", "a:0", "--batch", str(b),
                  "--input-len", str(PROMPT), "--output-len", str(OUTPUT), "-o", str(work / f"8b-{name}-b{b}.json"))


def _capture_entries(work: Path) -> None:
    """The captured units of both models as capture-cache entries (`check --seed-capture`): each
    captured into a cache folder of its own, WORK/captures/NAME/KEY.json."""
    import os

    from hetc.partitioner.capture.capture import capture

    for name, ref, dtype in (("tiny", str(work / "tiny"), "fp32"), ("8b", "llama-3.1-8b", "bf16")):
        folder = work / "captures" / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.json"):
            old.unlink()
        os.environ["HETC_CACHE_DIR"] = str(folder)
        try:
            capture(ref, dtype=dtype, kv_dtype=dtype)
        finally:
            del os.environ["HETC_CACHE_DIR"]
        (folder / "dtype").write_text(dtype)


def seed_capture(work: Path, tiny: Path) -> None:
    """Put `prepare`'s captures in this host's capture cache under this host's keys. For a GPU host
    whose torch differs from hetc's pin (the lent H100 has 2.11, whose torch.export rejects these
    models' dynamic token dim): the units are the 2.13 capture's, the served run is unchanged."""
    from hetc.partitioner.capture import capture_cache

    for name, ref in (("tiny", str(tiny)), ("8b", "llama-3.1-8b")):
        folder = work / "captures" / name
        dtype = (folder / "dtype").read_text()
        entry = next(folder.glob("*.json"))  # keyed by the preparing host's torch: re-keyed for this one
        key = capture_cache.cache_key(ref, dtype, dtype)
        d = capture_cache.cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{key}.json").write_bytes(entry.read_bytes())


class Served:
    def __init__(self, plan: Path, *extra: str, log: Path):
        self.port = 18000 + random.randrange(1000)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "hetc.cli", "serve", str(plan), "--port", str(self.port),
                                      "--served-model-name", "m", *extra], stderr=self.log, stdout=self.log)

    def __enter__(self) -> Served:
        if not wait_healthy(self.url, self.proc, 240):
            self.__exit__()
            raise RuntimeError(f"hetc serve did not start (log: {self.log.name})")
        return self

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    def decode_steps(self) -> tuple[float, float]:
        """(seconds, count) of every stage-0 decode step so far, from /metrics."""
        s = n = 0.0
        for line in httpx.get(f"{self.url}/metrics").text.splitlines():
            if 'phase="decode"' in line and 'stage="0.0"' in line:
                if line.startswith("hetc_stage_step_seconds_sum"):
                    s = float(line.rsplit(" ", 1)[1])
                elif line.startswith("hetc_stage_step_seconds_count"):
                    n = float(line.rsplit(" ", 1)[1])
        return s, n


async def _complete(url: str, bodies: list[dict]) -> list[dict]:
    async with httpx.AsyncClient(timeout=600) as ac:
        rs = await asyncio.gather(*(ac.post(f"{url}/v1/completions", json=b) for b in bodies))
    return [r.json() for r in rs]


def check_tiny(work: Path, out: Path, emulate: bool = False) -> dict:
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(work / "tiny")
    model = LlamaForCausalLM.from_pretrained(work / "tiny", torch_dtype=torch.float32).to(dev := "cpu" if emulate else "cuda").eval()
    lengths = [24, 9, 31, 16]
    ref = []
    for text, n in zip(TEXTS, lengths):
        ids = tok(text, return_tensors="pt").input_ids.to(dev)
        g = model.generate(ids, max_new_tokens=n, do_sample=False, min_new_tokens=n)
        ref.append(g[0, ids.shape[1]:].tolist())
    del model
    torch.cuda.empty_cache()
    res: dict = {}
    extra = ["--emulate", "--executor", "torch"] if emulate else []
    with Served(work / "tiny-plan.json", "--model-dir", str(work / "tiny"), *extra, log=out / "serve-tiny.log") as srv:
        res["models"] = httpx.get(f"{srv.url}/v1/models").json()
        got = asyncio.run(_complete(srv.url, [{"model": "m", "prompt": t, "max_tokens": n, "temperature": 0,
                                               "ignore_eos": True, "return_token_ids": True}
                                              for t, n in zip(TEXTS, lengths)]))
        if not emulate:  # the worker itself on the GPU, not only what the server reports
            smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
                                 capture_output=True, text=True).stdout
            res["gpu_processes"] = smi.strip().splitlines()
    res["served_tokens"] = [g["choices"][0].get("token_ids") for g in got]
    res["hf_tokens"] = ref
    res["identical"] = [s == r for s, r in zip(res["served_tokens"], ref)]
    return res


def check_8b(work: Path, out: Path) -> list[dict]:
    """One server (the plans differ only in their predictions), a round of `b` requests per batch."""
    rows = []
    g = random.Random(0)
    plan = lambda name, b: work / f"8b-{name}-b{b}.json"  # noqa: E731
    with Served(plan("catalog", max(BATCHES)), "--random-weights", "--max-num-seqs", str(max(BATCHES)),
                log=out / "serve-8b.log") as srv:
        for b in BATCHES:
            row: dict = {"batch": b}
            for name in ("catalog", "eager"):
                row[f"predicted_{name}_ms"] = json.loads(plan(name, b).read_text())["pipelines"][0]["stages"][0][
                    "predicted_ms"]["decode"]
            bodies = [{"model": "m", "prompt": [g.randrange(3, 128000) for _ in range(PROMPT)],
                       "max_tokens": OUTPUT, "temperature": 0, "ignore_eos": True} for _ in range(b)]
            asyncio.run(_complete(srv.url, bodies[:2]))  # warm-up
            s0, n0 = srv.decode_steps()
            t0 = time.perf_counter()
            got = asyncio.run(_complete(srv.url, bodies))
            wall = time.perf_counter() - t0
            s1, n1 = srv.decode_steps()
            row |= {"measured_decode_ms": (s1 - s0) / max(n1 - n0, 1) * 1e3, "decode_steps": n1 - n0,
                    "output_tok_s": sum(x["usage"]["completion_tokens"] for x in got) / wall}
            for name in ("catalog", "eager"):
                row[f"ratio_{name}"] = row[f"predicted_{name}_ms"] / row["measured_decode_ms"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("work")
    c = sub.add_parser("check")
    c.add_argument("work")
    c.add_argument("-o", "--output", default="gpu-serve.json")
    c.add_argument("--only", choices=["tiny", "8b"], default=None)
    c.add_argument("--emulate", action="store_true", help="the tiny check on this CPU: checks the script itself")
    c.add_argument("--seed-capture", action="store_true", help="put prepare's captures in this host's capture cache")
    a = ap.parse_args()
    work = Path(a.work).resolve()
    if a.cmd == "prepare":
        prepare(work)
        return 0
    out = Path(a.output).resolve()
    if a.seed_capture:
        seed_capture(work, work / "tiny")
    res: dict = {}
    for part, fn in (("tiny", check_tiny), ("8b", check_8b)):
        if a.only in (None, part):
            try:
                res[part] = check_tiny(work, out.parent, a.emulate) if part == "tiny" else fn(work, out.parent)
            except Exception as e:
                res[part] = {"error": f"{type(e).__name__}: {e}"}
            out.write_text(json.dumps(res, indent=1))
            print(json.dumps({part: res[part]})[:3000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
