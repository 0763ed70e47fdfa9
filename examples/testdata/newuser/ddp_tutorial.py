"""pytorch/tutorials' ddp_tutorial (Getting Started with DDP), as a new user
runs it under drover: the tutorial's ToyModel and its print() calls, with
only the CPU edits (gloo instead of nccl, no .cuda) and the rendezvous
from the environment drover (or torchrun) sets.

  python3 ddp_tutorial.py STEPS SLEEP [MODE]

Every rank prints one line per step with print() and sleeps SLEEP seconds
after it. MODE:
  ok        train STEPS steps and exit 0 (default)
  desync    ranks 0 and 1 exit 0 at once after the first step while the
            others go on training (a desync: the others then fail)
  child     also start a child process (as a DataLoader worker would)
"""

import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(steps, pause, mode):
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    print(f"Running basic DDP example on rank {rank}.")
    if mode == "child":
        # Stands for a DataLoader worker: a process of the rank's own.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", "newuser-child"])
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    for step in range(steps):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5)
        loss_fn(outputs, labels).backward()
        optimizer.step()
        print(f"rank {rank} step {step} done")
        if mode == "desync" and rank in (0, 1):
            print(f"rank {rank} leaves early")
            # At once: torch's teardown at interpreter exit can take longer
            # under load than the others' next step, and their failure then
            # reached drover before this exit did.
            sys.stdout.flush()
            os._exit(0)
        time.sleep(pause)
    dist.destroy_process_group()
    print(f"rank {rank} finished")


if __name__ == "__main__":
    demo_basic(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "ok")
