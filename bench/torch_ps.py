#!/usr/bin/python3
"""PyTorch reference for `chaosbed bench ps`: throughput of an asynchronous parameter server, in pushes/s.

N worker and S server processes (forked by torch.multiprocessing, one thread each, talking over 127.0.0.1).
Model: the MLP of --layers (ReLU between layers, softmax cross-entropy), batch --batch, over a pool of 16
pre-generated batches (inputs uniform in [0, 1), labels uniform over the classes), so nothing is loaded.
The flat parameter vector (every weight and bias, float32) is split into S contiguous ranges as chaosbed's
shardRanges() splits it (the first params % S ranges one longer); server s owns range s and applies SGD,
lr 0.01, momentum 0.9, to it, each gradient scaled by 1/N as chaosbed's server does.

One push (a worker's step): forward + backward on the worker's current parameters for one batch, then send
every server its slice of the gradient, all S requests in flight at once; each server applies it and
answers with its fresh slice, which the worker copies into its model. A server handles requests from any
worker in arrival order (one lock around the update; no barrier, no staleness bound), as chaosbed's
asynchronous parameter_server does.

Transport: torch.distributed.rpc over TensorPipe (rpc_async per shard). It works with Debian 12's torch
(1.13.0a0), so there is no gloo fallback. TensorPipe runs its uv transport (TCP over loopback, 127.0.0.1)
and basic channel, as chaosbed's UCX runs TCP over loopback; --shm lets it use shared memory (its shm
transport and cma channel, its default on one host) instead. Rendezvous is through a file in a temp dir.

Clock: the workers leave a barrier together, push for --warmup_s, then count their pushes over --seconds.
Correctness check (exit 1 when it fails): every server's version (updates applied) equals the pushes of
all workers, and every worker's parameters after its last reply are finite and differ from the initial
ones in every shard's range (so each reply reached the model). The pool loss of worker 0 before and after
is printed, not checked: with random labels it sits near ln(classes) until the net starts memorizing the
pool, and one run of 2 workers x 2 servers under load ended 0.01 above its start after ~900 pushes.

Run with Debian's Python (/usr/bin/python3, package python3-torch). Prints one line of text, or with --json
one JSON object. Exit status: 0 on success, 1 when a process failed, hung or the check failed, 2 on bad
arguments.
"""
import argparse
import ctypes
import json
import os
import signal
import sys
import tempfile
import threading
import time

# One thread per process for real (see torch_train.py): OpenBLAS reads these when torch loads it.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"
# TensorPipe logs "RPC agent ... is shutting down" through glog at INFO on stderr; keep warnings and errors.
os.environ.setdefault("GLOG_minloglevel", "1")
os.environ.setdefault("TP_SOCKET_IFNAME", "lo")  # TensorPipe's TCP transport: listen on loopback (127.0.0.1)

# Keep freed memory instead of giving it back to the kernel (see torch_train.py); forked children inherit it.
_libc = ctypes.CDLL("libc.so.6")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
if not (_libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20) and _libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)):
    sys.exit("torch_ps: mallopt failed")

import torch  # noqa: E402  (after the settings above)
import torch.distributed.rpc as rpc  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

LR, MOMENTUM, POOL = 0.01, 0.9, 16


def build(sizes):
    torch.manual_seed(1)  # every process builds the same initial parameters
    modules = []
    for i in range(len(sizes) - 1):
        modules.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


def shard_ranges(params: int, shards: int):
    """[lo, hi) of each shard, as chaosbed's shardRanges(): the first params % shards get one more."""
    ranges, lo = [], 0
    for s in range(shards):
        count = params // shards + (1 if s < params % shards else 0)
        ranges.append((lo, lo + count))
        lo += count
    return ranges


# A server's state, set in the server process before it joins the RPC group. RPC calls run on TensorPipe's
# thread pool, so the lock makes each update (and the copy of the reply) one step, in arrival order as far
# as the pool's threads take requests in order (a Python lock promises no FIFO among waiters).
_server = {}


def push(grad: torch.Tensor) -> torch.Tensor:
    st = _server
    with st["lock"]:
        st["momentum"].mul_(MOMENTUM).add_(grad, alpha=st["scale"])  # torch.optim.SGD's momentum, dampening 0
        st["param"].add_(st["momentum"], alpha=-LR)
        st["version"] += 1
        return st["param"].clone()  # a copy: the next update may run while this reply is serialized


def pool_loss(model, pool) -> float:
    loss_fn = torch.nn.CrossEntropyLoss()
    with torch.no_grad():
        return sum(float(loss_fn(model(x), y)) for x, y in pool) / len(pool)


def run_worker(index: int, args, model, ranges, start_barrier) -> dict:
    params = list(model.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    grad = torch.zeros_like(flat)
    offset = 0
    for p in params:  # parameters and gradients become views of the flat vectors: no packing per push
        n = p.numel()
        p.data = flat[offset:offset + n].view_as(p)
        p.grad = grad[offset:offset + n].view_as(p)
        offset += n
    sizes = args.sizes
    # Every worker the same pool: the data's values cost nothing here, and worker 0's pool loss then reflects
    # every worker's pushes (with random labels, a pool of its own would only learn from 1/N of them).
    gen = torch.Generator().manual_seed(1000)
    pool = [(torch.rand(args.batch, sizes[0], generator=gen), torch.randint(0, sizes[-1], (args.batch,), generator=gen))
            for _ in range(POOL)]
    loss_fn = torch.nn.CrossEntropyLoss()
    initial = flat.clone()
    loss_before = pool_loss(model, pool)

    start_barrier.wait(timeout=60)
    t0 = time.perf_counter()
    window_start, window_end = t0 + args.warmup_s, t0 + args.warmup_s + args.seconds
    pushes = counted = 0
    while True:
        x, y = pool[pushes % POOL]
        grad.zero_()
        loss_fn(model(x), y).backward()  # accumulates into the existing .grad views, in place
        if pushes == 0 and params[0].grad.data_ptr() != grad.data_ptr():
            raise RuntimeError("backward() replaced the gradient views: the flat gradient would be stale")
        futures = [rpc.rpc_async(f"ps{s}", push, args=(grad[lo:hi],)) for s, (lo, hi) in enumerate(ranges)]
        for fut, (lo, hi) in zip(futures, ranges):
            flat[lo:hi].copy_(fut.wait())
        pushes += 1
        now = time.perf_counter()
        if now >= window_end:
            break
        if now >= window_start:
            counted += 1
    # Loss over the pool on the parameters of its last reply (printed for worker 0, not checked: see the top).
    return {"worker": index, "counted": counted, "pushes": pushes, "finite": bool(torch.isfinite(flat).all()),
            "unmoved_shards": [s for s, (lo, hi) in enumerate(ranges) if torch.equal(flat[lo:hi], initial[lo:hi])],
            "loss_before": loss_before, "loss_after": pool_loss(model, pool)}


def process_main(rank: int, args, init_file: str, start_barrier, out) -> None:
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent, never orphaned
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    model = build(args.sizes)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ranges = shard_ranges(flat.numel(), args.shards)
    is_server = rank < args.shards
    if is_server:
        lo, hi = ranges[rank]
        _server.update(lock=threading.Lock(), param=flat[lo:hi].clone(), momentum=torch.zeros(hi - lo),
                       scale=1.0 / args.workers, version=0)
    # TensorPipe picks shared memory (shm transport, cma channel) between processes of one host by default;
    # chaosbed's UCX runs TCP over loopback, so unless --shm: its uv (TCP) transport and basic channel.
    tp = {} if args.shm else {"_transports": ["uv"], "_channels": ["basic"]}
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"file://{init_file}", rpc_timeout=30,
                                              num_worker_threads=max(4, args.workers + 2), **tp)
    name = f"ps{rank}" if is_server else f"w{rank - args.shards}"
    rpc.init_rpc(name, rank=rank, world_size=args.shards + args.workers, rpc_backend_options=options)
    result = run_worker(rank - args.shards, args, model, ranges, start_barrier) if not is_server else None
    # Graceful shutdown waits until every process has called it and every RPC is answered: this is how a
    # server learns that the workers are done. A worker that fails makes the parent kill everyone instead.
    rpc.shutdown()
    out.put(result if result else {"shard": rank, "version": _server["version"]})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--shards", type=int, default=1, help="server processes")
    parser.add_argument("--layers", default="784,256,128,10")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement time after the warm-up")
    parser.add_argument("--warmup_s", type=float, default=1.0)
    parser.add_argument("--shm", action="store_true", help="let TensorPipe use shared memory instead of TCP")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        args.sizes = [int(s) for s in args.layers.split(",")]
    except ValueError:
        parser.error(f"--layers: not a comma-separated list of integers: {args.layers!r}")
    if len(args.sizes) < 2 or min(args.sizes) < 1:
        parser.error(f"--layers: need at least two positive sizes, got {args.layers!r}")
    if args.workers < 1 or args.shards < 1 or args.batch < 1 or args.seconds <= 0 or args.warmup_s < 0:
        parser.error("--workers, --shards, --batch and --seconds must be positive, --warmup_s not negative")
    if args.shards > sum((a + 1) * b for a, b in zip(args.sizes, args.sizes[1:])):
        parser.error("--shards: more shards than parameters")
    if not rpc.is_available():
        print("torch_ps: this torch has no torch.distributed.rpc", file=sys.stderr)
        return 1

    procs = args.shards + args.workers
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    start_barrier = ctx.Barrier(args.workers)
    deadline = time.monotonic() + args.warmup_s + args.seconds + 60  # setup takes a few s; this is a hang
    with tempfile.TemporaryDirectory(prefix="torch_ps.") as tmp:
        context = mp.start_processes(process_main, args=(args, os.path.join(tmp, "rendezvous"), start_barrier, out),
                                     nprocs=procs, join=False, start_method="fork")
        try:
            # join() raises when a process failed, after terminating the others.
            while not context.join(timeout=0.5):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no result after {args.warmup_s + args.seconds + 60:.0f} s: killed")
        except Exception as e:  # ProcessRaisedException carries the child's traceback
            print(f"torch_ps: {args.workers} workers, {args.shards} servers: {e}", file=sys.stderr)
            return 1
        finally:
            for p in context.processes:
                if p.is_alive():
                    p.kill()
                p.join()
    results = [out.get() for _ in range(procs)]

    workers = sorted((r for r in results if "worker" in r), key=lambda r: r["worker"])
    versions = [r["version"] for r in sorted((r for r in results if "shard" in r), key=lambda r: r["shard"])]
    total = sum(r["pushes"] for r in workers)
    if any(v != total for v in versions):
        print(f"torch_ps: check failed: servers applied {versions} updates, workers pushed {total}", file=sys.stderr)
        return 1
    w0 = workers[0]
    for r in workers:
        if not r["finite"] or r["unmoved_shards"]:
            print(f"torch_ps: check failed: worker {r['worker']}: parameters finite: {r['finite']}, shards whose "
                  f"parameters never changed: {r['unmoved_shards']}", file=sys.stderr)
            return 1

    per_worker = [r["counted"] / args.seconds for r in workers]
    total_rate = sum(per_worker)
    if args.json:
        print(json.dumps({"peer": "pytorch", "transport": "rpc", "workers": args.workers, "shards": args.shards,
                          "layers": args.layers, "batch": args.batch, "pushes_per_s": total_rate,
                          "per_worker_pushes_per_s": per_worker, "torch": torch.__version__,
                          "tensorpipe": "shm" if args.shm else "tcp"}))
    else:
        print(f"torch ps (rpc, {'shm' if args.shm else 'tcp'}): mlp {args.layers}, batch {args.batch}, {args.workers} workers, {args.shards} servers: "
              f"{total_rate:.0f} pushes/s ({', '.join(f'{r:.0f}' for r in per_worker)} per worker), "
              f"loss {w0['loss_before']:.3f} -> {w0['loss_after']:.3f} (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
