# The seed's FAQ deadlock: both ranks receive first, so neither ever sends.
# hcomm does not hang: each receive ends at timeout_ms (HCOMM_TIMEOUT_MS)
# with RuntimeError "hcomm operation timeout: ..." naming the peer and tag
# it waited for. The fix: one rank sends first (or use isend/irecv).
#
#   HCOMM_TIMEOUT_MS=3000 hcomm_run -n 2 -- python3 deadlock.py
import torch
import torch.distributed as dist
import hcomm

dist.init_process_group(backend="gloo")
rank = dist.get_rank()
peer = 1 - rank
tensor = torch.zeros(4)

hcomm.recv(tensor, src=peer, tag=0)  # both ranks wait here: nobody sends
hcomm.send(tensor, dst=peer, tag=0)
