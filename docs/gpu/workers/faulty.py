"""tests/scenarios/test_script.py's FAULTY script, on CUDA: each way a script can end, with
DataLoader workers (mode workers) and a child of its own beside them."""
import argparse, signal, subprocess, sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--mode")
p.add_argument("--device", default="cuda")
args = p.parse_args()
mode, device = args.mode, args.device
print(f"starting {mode}", flush=True)

sleeper = subprocess.Popen(["sleep", "600"])  # a child that the end of the window, or a timeout, kills

def died(*_):  # as a DataLoader's SIGCHLD handler raises when one of its workers is killed
    if sleeper.poll() is not None:
        raise RuntimeError("a child of the script died")

signal.signal(signal.SIGCHLD, died)
if mode == "nostep":
    sys.exit(0)
if mode == "hang":
    time.sleep(600)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 2)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(4096, 256), torch.zeros(4096, dtype=torch.long)), batch_size=64,
                    num_workers=2 if mode.startswith("workers") else 0, pin_memory=True)
if mode.startswith("workers"):  # a child of its own besides the DataLoader's workers
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "child-of-a-trial"])
for epoch in range(1 if mode == "early" else 100000):
    for step, (x, y) in enumerate(loader):
        if mode == "crash" and step == 3:
            raise ValueError("the data went wrong at step 3")
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
print("finished", flush=True)
