"""Which launch in a BERT-base first step waits for the driver's JIT (run in a new folder, then again)."""
import os, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import experiments.bert as b
from torch.profiler import profile, ProfilerActivity

dev = torch.device("cuda:0")
torch.zeros(1, device=dev); torch.cuda.synchronize()
w = b.build({"model": "bert-base", "seq_len": 128}, dev)
opt = torch.optim.AdamW(w.model.parameters(), lr=1e-4, fused=True)
dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[sys.argv[2]]
scaler = torch.amp.GradScaler("cuda") if dt == torch.float16 else None
t0 = time.time()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    batch = w.make_batch(128)
    with torch.autocast("cuda", dtype=dt):
        loss = w.loss(w.model, batch)
    if scaler: scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    else: loss.backward(); opt.step()
    torch.cuda.synchronize()
print(f"cwd {os.getcwd()} dtype {sys.argv[2]} first step {time.time()-t0:.2f} s", flush=True)
slow = []
for e in prof.events():
    d = e.cpu_time_total / 1e3
    if e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaFuncGetAttributes",
                  "cuModuleLoadData", "cuModuleLoadDataEx", "cuLibraryLoadData", "cudaGetFuncBySymbol") or d > 150:
        if d > 50:
            chain, p = [], e.cpu_parent
            while p is not None and len(chain) < 6:
                chain.append(p.name); p = p.cpu_parent
            slow.append((d, e.name, " < ".join(chain)))
for d, n, c in sorted(slow, reverse=True)[:25]:
    print(f"  {d:8.1f} ms  {n}  <  {c}")
