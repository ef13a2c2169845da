"""hcomm beside torch.distributed: joining through torch's store, and torch's
groups as hcomm groups.

Joining. A script that called dist.init_process_group(...) (any backend)
and then calls hcomm without hcomm.init() joins on its first call: rank 0
starts hcomm's store on a free port and publishes "host:port" and a job
token under one key of torch's store; the others read them there. hcomm
never asks for MASTER_PORT, which torch's store holds.

Groups. torch.distributed.new_group is collective over every rank of the
job, so hcomm wraps it (from `import hcomm` when torch.distributed is
loaded, or from the join): each call is remembered with its ranks on every
rank, members or not, and, once hcomm has joined, made into an hcomm group
at once by the same collective call (hcomm_comm_create_group over the
job). Groups made before the join are made at the join, which every rank
enters. A torch group is then found by identity (group_of). A group made
before hcomm could wrap new_group (torch imported after hcomm and the group
made before hcomm's first call) is refused by name.
"""

import datetime
import functools
import json
import os
import secrets
import socket
import sys
import threading

from .errors import UnavailableError, _invalid, _message, Status

_lock = threading.RLock()
# One record per torch new_group call this process saw, in call order:
# [torch group (or torch's NON_GROUP_MEMBER), job ranks in group order,
#  the torch default group it was made in, the hcomm group or None].
_groups = []
_wrapped = False
_joins = 0


def torch_distributed():
    """torch.distributed when it is loaded and initialised, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
    except Exception:  # a half-imported torch
        return None
    return dist


def _c10d():
    return sys.modules["torch.distributed.distributed_c10d"]


def wrap_new_group():
    """Wraps torch.distributed.new_group (once) when torch.distributed is
    loaded: see the module's comment."""
    global _wrapped
    dist = sys.modules.get("torch.distributed")
    if dist is None or not hasattr(dist, "new_group"):
        return
    with _lock:
        if _wrapped:
            return
        c10d = _c10d()
        original = c10d.new_group

        @functools.wraps(original)
        def new_group(*args, **kwargs):
            pg = original(*args, **kwargs)
            ranks = args[0] if args else kwargs.get("ranks")
            _remember(pg, ranks)
            return pg

        c10d.new_group = new_group
        dist.new_group = new_group
        _wrapped = True


def _remember(pg, ranks):
    c10d = _c10d()
    world = c10d._get_default_group()
    ranks = sorted(int(r) for r in ranks) if ranks is not None else \
        list(range(world.size()))  # torch orders a group's ranks so
    record = [pg, ranks, world, None]
    with _lock:
        _groups.append(record)
        from . import _joined_default
        comm = _joined_default()
        if comm is not None:
            _mirror(comm, record)


def _mirror(comm, record):
    """Makes record's hcomm group: collective over the job (comm)."""
    sub = comm.new_group(record[1])
    record[3] = sub


def mirror_all(comm):
    """At the join (every rank is there): the hcomm groups of the torch
    groups of the current torch job made so far."""
    wrap_new_group()
    c10d = _c10d()
    world = c10d._get_default_group()
    with _lock:
        for record in _groups:
            if record[2] is world and record[3] is None:
                _mirror(comm, record)


def group_of(pg):
    """The hcomm communicator of torch group pg; None when pg is no torch
    group hcomm knows."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not isinstance(pg, dist.ProcessGroup):
        return None
    c10d = _c10d()
    from . import get_default_group
    comm = get_default_group()  # joins (and mirrors) first where needed
    if pg is c10d._get_default_group():
        return comm
    with _lock:
        for record in _groups:
            if record[0] is pg and record[3] is not None and not record[3].closed:
                return record[3]
    raise _invalid("group: hcomm has no group for this torch.distributed group: it was made "
                   "before hcomm could see dist.new_group (import hcomm, or hcomm.torch, "
                   "before making groups), or the hcomm group has been destroyed")


def _store_host(store):
    """The host the others reach rank 0 by."""
    addr = os.environ.get("MASTER_ADDR")
    if addr:
        return addr
    while store is not None:
        host = getattr(store, "host", None)
        if isinstance(host, str) and host:
            return host
        store = getattr(store, "underlying_store", None)
    return socket.gethostname()


def _free_port(host):
    """A port free on host now (the store binds it a moment later; another
    process taking it meanwhile makes rank 0's init fail with a message
    naming the port)."""
    for where in (host, ""):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((where, 0))
                return s.getsockname()[1]
        except OSError:
            continue
    raise UnavailableError(_message(Status.ERR_UNAVAILABLE,
                                    "no free TCP port for hcomm's store on %s" % host),
                           Status.ERR_UNAVAILABLE)


def _timeout_ms(config):
    value = config.get("timeout_ms")
    if value is None:
        value = os.environ.get("HCOMM_TIMEOUT_MS", "300000")
    try:
        return max(1, int(value))
    except ValueError:
        return 300000


def join(store, rank, size, **config):
    """Joins hcomm as rank `rank` of `size` through torch store `store`;
    returns the job's Communicator (hcomm.init's other keys in config)."""
    global _joins
    from ._communicator import Communicator
    with _lock:
        _joins += 1
        key = "hcomm/join/%d" % _joins
    if rank == 0:
        host = _store_host(store)
        token = config.get("job_token") or os.environ.get("HCOMM_JOB_TOKEN") or \
            secrets.token_hex(16)
        store.set(key, json.dumps({"store_addr": "%s:%d" % (host, _free_port(host)),
                                   "job_token": token}))
    timeout_ms = _timeout_ms(config)
    try:
        store.wait([key], datetime.timedelta(milliseconds=timeout_ms))
        info = json.loads(store.get(key))
    except Exception as e:
        raise UnavailableError(_message(
            Status.ERR_UNAVAILABLE,
            "rank %d of %d: rank 0 did not publish hcomm's store address in torch's store "
            "(key %r) within %d ms: %s" % (rank, size, key, timeout_ms, e)),
            Status.ERR_UNAVAILABLE) from None
    config = dict(config)
    config.update(rank=rank, world_size=size, store_addr=info["store_addr"],
                  job_token=info["job_token"])
    return Communicator.from_config(**config)


def join_torch_job(**config):
    """join() through the store of torch.distributed's default group."""
    dist = torch_distributed()
    return join(_c10d()._get_default_store(), dist.get_rank(), dist.get_world_size(), **config)
