#!/usr/bin/python3
"""PyTorch reference for `chaosbed bench train`: the same model (--model mlp: 784-256-128-10, ReLU; cnn and
resnet: the nets of core/model/cnn.h built from nn.Conv2d, on 1 x 28 x 28 images), softmax cross-entropy,
batch 64, SGD with momentum 0.9, on ONE thread, over a pool of 16 pre-generated batches (inputs uniform in
[0, 1), labels uniform over the classes), so that only forward + backward + update is measured.

Run with Debian's Python (/usr/bin/python3, package python3-torch), which uses the system BLAS
(OpenBLAS through update-alternatives). Prints one line of text, or with --json one JSON object with
samples_per_s and the torch version.
"""
import argparse
import ctypes
import json
import os
import sys
import time

# One thread for real: torch.set_num_threads(1) leaves OpenBLAS's own thread pool, which ran the
# convolutions' GEMMs on a second core. OpenBLAS reads these when torch loads it.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

# The peer at its best: glibc gives freed blocks of 128 KiB and more back to the kernel (its mmap and trim
# thresholds), so a step's activations page-fault again every step until glibc's adaptive threshold has
# caught up, or not: the CNN ran at 2-5k or at 7-9k samples/s from one process to the next (160-450k
# against 43k page faults in a run). Keeping freed memory makes every run the fast one.
_libc = ctypes.CDLL("libc.so.6")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
if not (_libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20) and _libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)):
    sys.exit("torch_train: mallopt failed")

import torch  # noqa: E402  (after the settings above)


class Residual(torch.nn.Module):
    """y = ReLU(x + conv3x3(ReLU(conv3x3(x)))), as core/model/cnn.h's residual block."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.b = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.b(torch.relu(self.a(x))))


def build(kind: str, layers: str) -> tuple:
    """The model and its input shape per sample."""
    nn = torch.nn
    if kind == "cnn":
        return nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(16 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)), (1, 28, 28)
    if kind == "resnet":
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), Residual(16),
                             nn.MaxPool2d(2), Residual(16), nn.Flatten(), nn.Linear(16 * 7 * 7, 10)), (1, 28, 28)
    sizes = [int(s) for s in layers.split(",")]
    modules = []
    for i in range(len(sizes) - 1):
        modules.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            modules.append(nn.ReLU())
    return nn.Sequential(*modules), (sizes[0],)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=["mlp", "cnn", "resnet"], default="mlp")
    parser.add_argument("--layers", default="784,256,128,10", help="--model mlp only")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement time after the warm-up")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(1)
    model, shape = build(args.model, args.layers)
    classes = model[-1].out_features
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    pool = [(torch.rand(args.batch, *shape), torch.randint(0, classes, (args.batch,))) for _ in range(16)]

    def step(i: int) -> None:
        x, y = pool[i % len(pool)]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()

    for i in range(200):  # warm-up
        step(i)
    steps = 0
    cpu_start = time.process_time()
    start = time.perf_counter()
    deadline = start + args.seconds
    while True:
        for _ in range(64):
            step(steps)
            steps += 1
        now = time.perf_counter()
        if now >= deadline:
            break
    samples_per_s = steps * args.batch / (now - start)
    samples_per_cpu_s = steps * args.batch / (time.process_time() - cpu_start)
    if args.json:
        print(json.dumps({"samples_per_s": samples_per_s, "samples_per_cpu_s": samples_per_cpu_s, "steps": steps, "batch": args.batch,
                          "threads": torch.get_num_threads(), "model": args.model, "torch": torch.__version__}))
    else:
        shape_text = f"mlp {args.layers}" if args.model == "mlp" else args.model
        print(f"torch train: {shape_text}, batch {args.batch}, 1 thread: {steps} steps in "
              f"{now - start:.2f} s, {samples_per_s:.0f} samples/s, {samples_per_cpu_s:.0f} samples per CPU second "
              f"(torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
