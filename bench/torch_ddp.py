#!/usr/bin/python3
"""PyTorch DDP reference for chaosbed's `mirrored` strategy: time to accuracy on Fashion-MNIST.

Recipe (the same as bench/scenarios/ddp-<N>w.yaml): MLP 784-256-128-10 (ReLU, softmax cross-entropy), global
batch 256 split evenly over the ranks, SGD lr 0.1 momentum 0.9, pixels scaled to [0, 1], test accuracy on the
10,000 test images every 50 steps. Each epoch is a fresh permutation of the 60,000 training images drawn from
the seed; step s takes the global batch perm[256 s : 256 (s+1)] and rank r its r-th slice of it (the last
incomplete batch of an epoch is dropped).

Ranks are forked processes (torch.multiprocessing, fork: the data set is read once, before the fork), gloo
backend over loopback, one thread each (torch.set_num_threads(1), OMP/OpenBLAS threads 1). Run with Debian's
Python (/usr/bin/python3, package python3-torch), whose BLAS is the system one (OpenBLAS via
update-alternatives).

Clock: starts when every rank has joined the group, DDP has broadcast the initial parameters and a barrier
has passed. At an evaluation step every rank stops the clock after optimizer.step(), rank 0 evaluates, and a
barrier releases everyone, after which the clock runs again: evaluation time is excluded and no rank computes
while rank 0 evaluates. TTA is the clock at the end of the first step whose evaluation reaches the target.

All-reduce time: a DDP communication hook (the default gloo all-reduce plus a timestamp) records when a
gradient bucket is handed to gloo and when its all-reduce completes; per rank, the sum of those intervals
(waiting for peers plus transfer) over the training clock is `allreduce_fraction`. With one bucket (this
model's 0.9 MB of gradients fit DDP's default 25 MB bucket), nothing overlaps it.

Prints one line of text, or with --json one JSON object (see the `result` dict in main()).
Exit status: 0 when the run completed (reached or not: see `reached_target`), 1 when a rank failed, 2 on bad
arguments or data.
"""
import os

# Before torch is imported: one BLAS/OpenMP thread per rank.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


class DataError(Exception):
    pass


def read_idx(path: str, magic: int, dims: int) -> np.ndarray:
    """Reads a gzip'd IDX file (big-endian header: magic, then `dims` sizes) as a uint8 array."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError(f"{path}: {e}") from e
    header = 4 * (1 + dims)
    if len(raw) < header:
        raise DataError(f"{path}: truncated header ({len(raw)} bytes)")
    fields = np.frombuffer(raw[:header], dtype=">u4")
    if int(fields[0]) != magic:
        raise DataError(f"{path}: magic {int(fields[0]):#x}, expected {magic:#x}")
    shape = tuple(int(d) for d in fields[1:])
    count = int(np.prod(shape))
    if len(raw) - header != count:
        raise DataError(f"{path}: {len(raw) - header} data bytes, header says {shape} = {count}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def load_split(directory: str, prefix: str):
    images = read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"), 0x803, 3)
    labels = read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"), 0x801, 1)
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{directory}: {prefix}: {images.shape[0]} images but {labels.shape[0]} labels")
    x = torch.from_numpy(images.reshape(images.shape[0], -1).astype(np.float32) / 255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def build_model(sizes):
    modules = []
    for i in range(len(sizes) - 1):
        modules.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


def accuracy(model, x, y) -> float:
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 2000]).argmax(1) == y[i:i + 2000]).sum()) for i in range(0, len(x), 2000))
    model.train()
    return correct / len(x)


class AllreduceTimer:
    """DDP communication hook: gloo all-reduce of the bucket (averaged), timed from hand-over to completion."""

    def __init__(self, world: int):
        self.world = world
        self.seconds = 0.0
        self.calls = 0

    def hook(self, state, bucket):
        start = time.perf_counter()
        tensor = bucket.buffer().div_(self.world)
        fut = dist.all_reduce(tensor, async_op=True).get_future()

        def done(f):
            self.seconds += time.perf_counter() - start
            self.calls += 1
            return f.value()[0]

        return fut.then(done)


def rank_main(rank: int, args, train, test, init_file: str, out) -> None:
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    world = args.workers
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    torch.manual_seed(args.seed)  # the same initial parameters on every rank (DDP broadcasts rank 0's anyway)
    model = DistributedDataParallel(build_model(args.layers))
    timer = AllreduceTimer(world)
    model.register_comm_hook(None, timer.hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    train_x, train_y = train
    test_x, test_y = test
    per_rank = args.global_batch // world
    steps_per_epoch = len(train_x) // args.global_batch

    evals = []
    tta = None
    clock = 0.0
    step = 0
    epoch = -1
    perm = None
    dist.barrier()
    resumed = time.perf_counter()
    while True:
        if step // steps_per_epoch != epoch:
            epoch = step // steps_per_epoch
            perm = torch.from_numpy(np.random.RandomState(args.seed + epoch).permutation(len(train_x)))
        first = (step % steps_per_epoch) * args.global_batch + rank * per_rank
        idx = perm[first:first + per_rank]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(train_x[idx]), train_y[idx]).backward()
        optimizer.step()
        step += 1
        if step % args.eval_every == 0:
            clock += time.perf_counter() - resumed
            stop = torch.tensor([0])
            if rank == 0:
                acc = accuracy(model.module, test_x, test_y)
                evals.append({"step": step, "time_s": clock, "accuracy": acc})
                if tta is None and acc >= args.target:
                    tta = clock
                stop[0] = tta is not None or step >= args.max_steps or clock >= args.time_limit_s
            # Rank 0 decides when to stop, so every rank leaves the loop at the same step. The broadcast
            # doubles as the barrier that holds every rank while rank 0 evaluates.
            dist.broadcast(stop, 0)
            resumed = time.perf_counter()
            if int(stop[0]):
                break
    clock += time.perf_counter() - resumed

    fractions = [None] * world
    dist.all_gather_object(fractions, {"allreduce_s": timer.seconds, "train_s": clock, "calls": timer.calls})
    if rank == 0:
        out.put({"tta_seconds": tta, "steps": step, "evals": evals, "ranks": fractions})
    dist.barrier()
    # Leave without tearing down: torch 1.13's ProcessGroupGloo destructor joins its worker threads while
    # holding the GIL, and a worker still releasing a Python-owned tensor waits for the GIL: a deadlock seen
    # here at exit. Every collective has completed (barrier above) and the result is in the pipe.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--layers", default="784,256,128,10")
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--eval-every", type=int, default=50, help="steps between test evaluations")
    parser.add_argument("--max-steps", type=int, default=5000, help="checked at evaluations")
    parser.add_argument("--time-limit-s", type=float, default=120.0, help="training clock limit, checked at evaluations")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="gloo timeout for a collective")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        args.layers = [int(s) for s in args.layers.split(",")]
    except ValueError:
        parser.error(f"--layers: not a comma-separated list of integers: {args.layers!r}")
    if args.workers < 1:
        parser.error(f"--workers: must be >= 1, got {args.workers}")
    if args.global_batch % args.workers:
        parser.error(f"--global-batch {args.global_batch} does not split evenly over --workers {args.workers}")
    if args.layers[0] != 784 or args.layers[-1] != 10:
        parser.error(f"--layers: must start with 784 and end with 10 for Fashion-MNIST, got {args.layers}")

    try:
        train = load_split(args.data, "train")
        test = load_split(args.data, "t10k")
    except DataError as e:
        print(f"torch_ddp: {e}", file=sys.stderr)
        return 2

    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="torch_ddp.") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        wall = time.perf_counter()
        try:
            mp.start_processes(rank_main, args=(args, train, test, init_file, out), nprocs=args.workers,
                               start_method="fork")
        except mp.ProcessException as e:  # a rank raised or died: its traceback is in the message
            print(f"torch_ddp: {args.workers} ranks: {e}", file=sys.stderr)
            return 1
        wall = time.perf_counter() - wall
    r = out.get()

    ranks = r["ranks"]
    fractions = [x["allreduce_s"] / x["train_s"] for x in ranks if x["train_s"] > 0]
    result = {
        "framework": "pytorch-ddp",
        "torch": torch.__version__,
        "workers": args.workers,
        "batch_per_worker": args.global_batch // args.workers,
        "target_accuracy": args.target,
        "reached_target": r["tta_seconds"] is not None,
        "tta_seconds": r["tta_seconds"],
        "steps": r["steps"],
        "final_accuracy": r["evals"][-1]["accuracy"] if r["evals"] else None,
        "allreduce_fraction": sum(fractions) / len(fractions) if fractions else None,
        "allreduce_fraction_per_rank": fractions,
        "evals": r["evals"],
        "wall_seconds_with_setup": wall,
    }
    if args.json:
        print(json.dumps(result))
    else:
        tta = f"{result['tta_seconds']:.2f} s" if result["reached_target"] else "not reached"
        frac = result["allreduce_fraction"]
        frac = f"{100 * frac:.0f}%" if frac is not None else "-"
        print(f"pytorch ddp, {args.workers} workers: TTA({args.target}) {tta} after {result['steps']} steps, "
              f"final accuracy {result['final_accuracy']}, all-reduce {frac} of the training time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
