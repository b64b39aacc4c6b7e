"""Global batches: the sampler's split across processes, and the autograd gather on gloo."""

import os
import socket

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hfncl.engine.batches import GlobalBatchSampler
from hfncl.engine.distributed import gather
from hfncl.equations.losses import triplet_hardest_negative


def test_processes_see_the_single_process_batches():
    single = list(GlobalBatchSampler(50, 8, seed=3, drop_last=True))
    halves = [list(GlobalBatchSampler(50, 8, seed=3, drop_last=True, rank=r, world_size=2)) for r in range(2)]
    assert [a + b for a, b in zip(*halves, strict=True)] == single
    assert len(single) == 6 and all(len(b) == 8 for b in single)


def test_resume_skips_trained_batches_and_last_partial_batch_is_kept_for_statistics():
    full = list(GlobalBatchSampler(50, 8, seed=3, drop_last=True))
    assert list(GlobalBatchSampler(50, 8, seed=3, drop_last=True, start_batch=4)) == full[4:]
    ordered = list(GlobalBatchSampler(10, 4, seed=None, drop_last=False))
    assert ordered == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, port, inputs, weight, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    w = weight.clone().requires_grad_(True)
    local = inputs[rank * 3 : (rank + 1) * 3] if rank == 0 else inputs[3:]  # uneven: 3 and 4 rows
    embeds = gather(local @ w)
    loss = triplet_hardest_negative(embeds @ embeds.T, 0.2).sum()
    loss.backward()
    dist.all_reduce(w.grad)
    w.grad /= 2  # data-parallel averaging
    torch.save({"loss": loss.detach(), "grad": w.grad}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def test_gathered_loss_and_gradient_equal_single_process(tmp_path):
    torch.manual_seed(0)
    inputs, weight = torch.randn(7, 5), torch.randn(5, 4)
    w = weight.clone().requires_grad_(True)
    embeds = inputs @ w
    expected = triplet_hardest_negative(embeds @ embeds.T, 0.2).sum()
    expected.backward()
    mp.spawn(_worker, args=(_free_port(), inputs, weight, str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        torch.testing.assert_close(result["loss"], expected.detach())
        torch.testing.assert_close(result["grad"], w.grad)


def test_gather_is_identity_in_one_process():
    t = torch.arange(6.0).reshape(3, 2)
    assert gather(t) is t
    assert np.array_equal(gather(t).numpy(), t.numpy())
