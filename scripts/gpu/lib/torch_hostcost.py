#!/usr/bin/env python3
"""Host cost per call of torch.distributed collectives (NCCL backend), W processes on one GPU.

The PyTorch side of scripts/gpu/gpu-torch-hostcost.sh (issue 12): each process is one rank on device 0,
with its own NCCL_HOSTID=r<rank> (NCCL then lets the W processes share the GPU, as jnccl's
multi-process tests do), NCCL_SOCKET_IFNAME=lo and NCCL_NVLS_ENABLE=0; the ranks meet through a
TCP store on 127.0.0.1 (MASTER_ADDR / MASTER_PORT), so no network is needed.

Per case, on 1024 FP32 elements (--count), as users call them (async_op=False):
  all_reduce       dist.all_reduce(t)                          (in place, SUM)
  reduce_scatter   dist.reduce_scatter_tensor(out, t)          (out: count / W elements, SUM)
--warmup calls, then --reps repetitions of --iters calls timed with time.perf_counter_ns around the
loop; torch.cuda.synchronize() after every 256th call, inside the loop, so the device queue stays
short (as jnccl's and the C program's loops); the time spent in it is kept apart, giving the
host-only ("enqueue") figure. The ranks meet at dist.barrier() before every repetition. One
parseable line per rank and case, as jnccl's tools print them:
  RESULT impl=torch case=all_reduce mode=torch launch=process world=2 rank=0 median_us=... min_us=...
         enqueue_median_us=... enqueue_min_us=... iters=2000 reps=3 samples_us=...

Rank and world size: --rank/--world, else OMPI_COMM_WORLD_RANK/SIZE (mpirun), else RANK/WORLD_SIZE.
--spawn W starts W copies of this program itself (plain subprocesses, no MPI) and waits for them.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import traceback

SYNC_EVERY = 256
CASES = ("all_reduce", "reduce_scatter")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=None, help="ranks (default: from the launcher's environment)")
    p.add_argument("--rank", type=int, default=None, help="this process's rank (default: from the environment)")
    p.add_argument("--spawn", type=int, default=0, metavar="W", help="start W ranks as subprocesses and wait")
    p.add_argument("--count", type=int, default=1024)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--out-dir", default=None, help="also write each rank's lines to DIR/torch.<rank>.txt")
    p.add_argument("--timeout", type=int, default=900, help="seconds: --spawn kills its ranks past it")
    args = p.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    bad = [c for c in cases if c not in CASES]
    if bad or not cases:
        p.error("unknown case(s) %s in --cases %s (known: %s)" % (bad, args.cases, ",".join(CASES)))
    if args.count < 1 or args.iters < 1 or args.reps < 1 or args.warmup < 0:
        p.error("--count, --iters and --reps must be positive, --warmup not negative")
    args.cases = cases
    return args


def env_int(*names):
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(args, argv):
    """Starts args.spawn ranks of this program, each with its rank in the environment; waits for all."""
    world = args.spawn
    port = os.environ.get("MASTER_PORT") or str(free_port())
    rest = []
    skip = False
    for a in argv:  # the same options, without --spawn W
        if skip:
            skip = False
            continue
        if a == "--spawn":
            skip = True
            continue
        if a.startswith("--spawn="):
            continue
        rest.append(a)
    children = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        children.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + rest, env=env))
    deadline = time.monotonic() + args.timeout
    status = 0
    for rank, child in enumerate(children):
        try:
            code = child.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print("torch_hostcost: rank %d ran past %d s; stopping all ranks" % (rank, args.timeout), file=sys.stderr)
            for c in children:
                if c.poll() is None:
                    c.kill()
            for c in children:
                c.wait()
            return 124
        if code != 0:
            print("torch_hostcost: rank %d exited with %d" % (rank, code), file=sys.stderr)
            status = 1
    return status


def barrier(dist, device):
    """dist.barrier on this rank's device: without device_ids older torch guesses it from the rank."""
    try:
        dist.barrier(device_ids=[device])
    except TypeError:
        dist.barrier()


def measure(name, op, world, rank, args, torch, dist, emit):
    """Times op() as the class comment says; emits one RESULT line."""
    for i in range(1, args.warmup + 1):
        op()
        if i % SYNC_EVERY == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    totals, enqueues, samples = [], [], []
    for _ in range(args.reps):
        barrier(dist, args.device)
        torch.cuda.synchronize()
        sync_ns = 0
        start = time.perf_counter_ns()
        for i in range(1, args.iters + 1):
            op()
            if i % SYNC_EVERY == 0:
                s = time.perf_counter_ns()
                torch.cuda.synchronize()
                sync_ns += time.perf_counter_ns() - s
        elapsed = time.perf_counter_ns() - start
        torch.cuda.synchronize()
        totals.append(elapsed / 1000.0 / args.iters)
        enqueues.append((elapsed - sync_ns) / 1000.0 / args.iters)
        samples.append("%.3f" % totals[-1])
    emit("RESULT impl=torch case=%s mode=torch launch=process world=%d rank=%d median_us=%.3f min_us=%.3f"
         " enqueue_median_us=%.3f enqueue_min_us=%.3f iters=%d reps=%d samples_us=%s"
         % (name, world, rank, statistics.median(totals), min(totals), statistics.median(enqueues), min(enqueues),
            args.iters, args.reps, ",".join(samples)))


def run_rank(args):
    world = args.world if args.world is not None else env_int("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE")
    rank = args.rank if args.rank is not None else env_int("OMPI_COMM_WORLD_RANK", "RANK")
    if world is None or rank is None or world < 1 or not 0 <= rank < world:
        print("torch_hostcost: no rank / world size (give --rank and --world, or run under mpirun or --spawn)",
              file=sys.stderr)
        return 2
    if args.count % world != 0:
        print("torch_hostcost: --count %d is not divisible by the world size %d" % (args.count, world), file=sys.stderr)
        return 2
    # Before torch loads NCCL: every process is its own "host" to NCCL, so W ranks may share one GPU.
    os.environ["NCCL_HOSTID"] = "r%d" % rank
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world)
    if "MASTER_PORT" not in os.environ:
        print("torch_hostcost: MASTER_PORT is not set (the launcher must pick one free port for all ranks)",
              file=sys.stderr)
        return 2

    try:
        import datetime
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print("torch_hostcost: rank %d: cannot import torch: %s" % (rank, e), file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_hostcost: rank %d: torch sees no CUDA device" % rank, file=sys.stderr)
        return 3

    out = None
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        out = open(os.path.join(args.out_dir, "torch.%d.txt" % rank), "w")

    def emit(line):
        print(line, flush=True)
        if out is not None:
            out.write(line + "\n")
            out.flush()
    torch.cuda.set_device(args.device)
    device = torch.device("cuda", args.device)
    timeout = datetime.timedelta(seconds=max(60, args.timeout // 2))
    try:
        try:  # device_id (torch >= 2.3) makes NCCL's communicator now instead of at the first call
            dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world, timeout=timeout,
                                    device_id=device)
        except TypeError:
            dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world, timeout=timeout)
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version()) if isinstance(
                torch.cuda.nccl.version(), tuple) else str(torch.cuda.nccl.version())
        except Exception:  # the version is only informative
            nccl = "?"
        emit("# torch %s, NCCL %s, CUDA %s, %s, rank %d of %d on device %d, NCCL_HOSTID=%s, %d x FP32"
             % (torch.__version__, nccl, torch.version.cuda, torch.cuda.get_device_name(args.device), rank, world,
                args.device, os.environ["NCCL_HOSTID"], args.count))
        # Zeros, as jnccl's and the C program's buffers: repeated in-place sums stay finite.
        tensor = torch.zeros(args.count, device=device, dtype=torch.float32)
        shard = torch.empty(args.count // world, device=device, dtype=torch.float32)

        # One check that the collectives do what they are timed for (small integers: exact sums).
        check = torch.full((args.count,), float(rank + 1), device=device)
        dist.all_reduce(check)
        expected = world * (world + 1) / 2
        if not bool(torch.all(check == expected)):
            raise RuntimeError("all_reduce check failed: expected %s everywhere, got %s" % (expected, check[:4]))
        check.fill_(float(rank + 1))
        dist.reduce_scatter_tensor(shard, check)
        if not bool(torch.all(shard == expected)):
            raise RuntimeError("reduce_scatter_tensor check failed: expected %s, got %s" % (expected, shard[:4]))

        ops = {
            "all_reduce": lambda: dist.all_reduce(tensor),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, tensor),
        }
        for name in args.cases:
            measure(name, ops[name], world, rank, args, torch, dist, emit)
        barrier(dist, args.device)
        return 0
    except Exception:
        print("torch_hostcost: rank %d failed:\n%s" % (rank, traceback.format_exc()), file=sys.stderr)
        return 1
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass
        if out is not None:
            out.close()


def main(argv):
    args = parse_args(argv)
    if args.spawn:
        return spawn(args, argv)
    return run_rank(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
