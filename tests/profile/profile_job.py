"""A 4-rank job as the seed profiles it: `export HCOMM_PROFILE=1`, run, and
`hcomm-visualize hcomm_profile.json`.

Each rank allreduces numpy vectors of several sizes, sends a message round
a ring, runs an allreduce on a stream and one task of the scheduler. With
DELAY_RANK=R, rank R comes 50 ms late to allreduce number DELAY_CALL (of
the 64 KiB ones), the straggler the report must find.
"""

import os
import time

import numpy as np

import hcomm


def main():
    hcomm.init()
    rank, size = hcomm.get_rank(), hcomm.get_world_size()
    delay_rank = int(os.environ.get("DELAY_RANK", "-1"))
    delay_call = int(os.environ.get("DELAY_CALL", "5"))
    for n in (256, 16384, 262144):
        v = np.ones(n, np.float32)
        for i in range(10):
            if n == 16384 and i == delay_call and rank == delay_rank:
                time.sleep(0.05)
            hcomm.all_reduce(v)
    right, left = (rank + 1) % size, (rank - 1) % size
    msg = np.full(1000, rank, np.int32)
    got = np.empty_like(msg)
    if rank % 2 == 0:
        hcomm.send(msg, dst=right, tag=3)
        hcomm.recv(got, src=left, tag=3)
    else:
        hcomm.recv(got, src=left, tag=3)
        hcomm.send(msg, dst=right, tag=3)
    assert (got == left).all()
    with hcomm.Stream(priority=5) as s:
        t = np.ones(4096, np.float32)
        hcomm.all_reduce(t, stream=s)
    assert (t == size).all()
    scheduler = hcomm.CommunicationScheduler()
    g = np.ones(1024, np.float32)
    scheduler.register_task(task_id="gradient_sync", func=lambda: hcomm.all_reduce(g),
                            priority=10)
    scheduler.run()
    hcomm.barrier()
    # The world is destroyed at exit; rank 0 then writes hcomm_profile.json.


if __name__ == "__main__":
    main()
