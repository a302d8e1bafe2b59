"""PyTorch (eager, one GPU) twin of a Fashion-MNIST bundle's training step, for the GPU kit's
side-by-side table: the MLP (784-256-128-10) or the CNN (two 5x5 conv + 2x2 max pool, fc 256,
fc 10) of examples/fashion_mnist.py, Adam, softmax cross-entropy, reading the bundle's own
data/*.npy with the bundle's batch size. Every step copies its batch from host memory to the
GPU, as `loom run --place cuda:0` does. Prints one JSON object: steps/s over --steps timed
steps after --warmup untimed ones (the clock stops after torch.cuda.synchronize()).

    python3 bench/gpu/torch_train.py --bundle DIR --model mlp|cnn [--steps 300] [--device cuda]
"""
import argparse
import json
import os
import re
import time

import numpy as np
import torch
import torch.nn.functional as F


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 256)
        self.fc2 = torch.nn.Linear(256, 128)
        self.fc3 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 256)
        self.fc2 = torch.nn.Linear(256, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        return self.fc2(F.relu(self.fc1(x.reshape(x.shape[0], -1))))


def bundle_batch(bundle):
    with open(os.path.join(bundle, "bundle.pbtxt")) as f:
        m = re.search(r"batch_size:\s*(\d+)", f.read())
    return int(m.group(1)) if m else 64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    dev = torch.device(args.device)
    x = np.load(os.path.join(args.bundle, "data", "image.npy"))
    y = np.load(os.path.join(args.bundle, "data", "label.npy")).reshape(-1)
    batch = bundle_batch(args.bundle)
    n = x.shape[0] // batch
    xs = [torch.from_numpy(np.ascontiguousarray(x[i * batch:(i + 1) * batch])) for i in range(n)]
    ys = [torch.from_numpy(np.ascontiguousarray(y[i * batch:(i + 1) * batch])) for i in range(n)]
    torch.manual_seed(1)
    model = (Mlp() if args.model == "mlp" else Cnn()).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(i):
        xb, yb = xs[i % n].to(dev), ys[i % n].to(dev)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    last = float(loss.detach())  # waits for the last step
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"model": args.model, "batch": batch, "steps": args.steps,
                      "steps_per_s": args.steps / dt, "last_loss": last,
                      "torch": torch.__version__, "device": str(dev)}))


if __name__ == "__main__":
    main()
