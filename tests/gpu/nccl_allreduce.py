"""One-rank NCCL all-reduce and broadcast through torch.distributed (NCCL allocates its own
buffers, through cudaMalloc or the VMM API). The sums are exact in float64 on integers."""
import os
import select
import socket
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on these machines
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1, device_id=torch.device("cuda:0"))
    n = 64 << 20
    x = torch.arange(n, dtype=torch.float64, device="cuda")
    dist.all_reduce(x)
    want = n * (n - 1) / 2
    print(f"RESULT allreduce sum_ok={int(x.sum().item() == want)}")
    y = torch.full((1 << 20,), 3.0, device="cuda")
    dist.broadcast(y, src=0)
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    print(f"RESULT broadcast_max ok={int(bool((y == 3.0).all()))}")
    if os.environ.get("GPUCHECK_HANDSHAKE"):
        print(f"HOLD {torch.cuda.memory_reserved()}\nREADY nccl", flush=True)
        if select.select([sys.stdin], [], [], 120)[0]:
            sys.stdin.readline()
    z = torch.ones(16 << 20, device="cuda")
    for _ in range(10):
        dist.all_reduce(z)
    print(f"RESULT repeated ok={int(bool((z == 1.0).all()))}")
    dist.destroy_process_group()
    print("nccl_allreduce: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
