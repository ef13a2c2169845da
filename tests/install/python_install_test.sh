#!/usr/bin/env bash
# Installs hcomm into a temporary prefix with tools/install.sh, then uses only
# the installed Python package the way a user would: no Bazel, no runfiles,
# PYTHONPATH=DIR/python with Debian's /usr/bin/python3, 4 ranks started by
# DIR/bin/hcomm_run. The script below (written as a user would write it)
# covers send/recv, isend/irecv, all_reduce with op=hcomm.ReduceOp.SUM,
# new_group with group=, an any-source parameter-server receive, the
# exception types and SharedMemoryChannel. Also checks that
# DIR/python/hcomm/_native.so finds DIR/lib/libhcomm_c.so through its
# RUNPATH ($ORIGIN/../../lib).
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

install_sh="$(runfile tools/install)" || fail "tools/install not in the runfiles"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/pyinstall.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

RUNFILES_DIR="${RUNFILES_DIR:-$TEST_SRCDIR}" "$install_sh" --prefix="$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "install.sh failed"; }
for f in python/hcomm/__init__.py python/hcomm/errors.py python/hcomm/_native.so \
         lib/libhcomm_c.so bin/hcomm_run; do
  [[ -e "$prefix/$f" ]] || fail "missing $prefix/$f"
done

native="$prefix/python/hcomm/_native.so"
readelf -d "$native" | grep -E 'RUNPATH|RPATH' | grep -qF '$ORIGIN/../../lib' ||
  fail "_native.so has no RUNPATH \$ORIGIN/../../lib: $(readelf -d "$native" | grep -E 'RUNPATH|RPATH')"
resolved="$(env -u LD_LIBRARY_PATH ldd "$native" | awk '$1 == "libhcomm_c.so" { print $3 }')"
[[ "$(readlink -f "$resolved")" == "$(readlink -f "$prefix/lib/libhcomm_c.so")" ]] ||
  fail "_native.so resolves libhcomm_c.so to '$resolved', not $prefix/lib/libhcomm_c.so"

# What a user writes: app.py, started as 4 ranks by the installed launcher.
cat >"$work/app.py" <<'PY'
import os
import numpy as np
import hcomm

hcomm.init(timeout_ms=30000)
rank, size = hcomm.get_rank(), hcomm.get_world_size()
assert size == 4

# send / recv around a ring (even ranks send first).
nxt, prv = (rank + 1) % size, (rank - 1) % size
got = np.zeros(3, np.int32)
if rank % 2 == 0:
    hcomm.send(np.full(3, rank, np.int32), dst=nxt)
    assert hcomm.recv(got, src=prv) == prv
else:
    assert hcomm.recv(got, src=prv) == prv
    hcomm.send(np.full(3, rank, np.int32), dst=nxt)
assert (got == prv).all()
print("ok: send/recv")

# isend / irecv
buf = bytearray(5)
r = hcomm.irecv(buf, src=prv, tag=9)
s = hcomm.isend(b"hi %02d" % rank, dst=nxt, tag=9)
s.wait(); r.wait()
assert r.is_completed() and bytes(buf) == b"hi %02d" % prv
print("ok: isend/irecv")

# all_reduce, in place
t = np.arange(4, dtype=np.float32) + rank
hcomm.all_reduce(t, op=hcomm.ReduceOp.SUM)
assert t.tolist() == [6.0, 10.0, 14.0, 18.0], t
print("ok: all_reduce")

# new_group with group=
g = hcomm.new_group(ranks=[1, 3])
if rank in (1, 3):
    v = np.array([rank], np.int64)
    hcomm.all_reduce(v, op=hcomm.ReduceOp.MAX, group=g)
    assert v[0] == 3 and hcomm.get_rank(group=g) == rank // 2
    hcomm.destroy(g)
else:
    assert g is hcomm.GroupMember.NON_GROUP_MEMBER
print("ok: new_group")

# parameter server: rank 0 takes gradients from whoever is first
w = np.zeros(2)
for step in range(3):
    hcomm.broadcast(w, src=0)
    if rank == 0:
        total, senders = np.zeros(2), set()
        for _ in range(size - 1):
            grad = np.zeros(2)
            senders.add(hcomm.recv(grad, src=None, tag=1))
            total += grad
        assert senders == {1, 2, 3}
        w += total / (size - 1)
    else:
        hcomm.send(np.array([rank, 1.0]), dst=0, tag=1)
hcomm.broadcast(w, src=0)
assert w.tolist() == [6.0, 3.0], w
print("ok: parameter server")

# exceptions
try:
    hcomm.send(np.zeros(1), dst=size)
    raise SystemExit("no error")
except hcomm.InvalidArgumentError as e:
    assert isinstance(e, hcomm.HcommError) and e.status == 1
if rank == 0:
    hcomm.get_default_group().set_timeout(200)
    try:
        hcomm.recv(np.zeros(1), src=1, tag=77)
        raise SystemExit("no timeout")
    except TimeoutError as e:  # the builtin one
        assert isinstance(e, hcomm.TimeoutError) and e.status == 4
    hcomm.get_default_group().set_timeout(30000)
try:
    hcomm.all_reduce(np.zeros(6)[::2])
    raise SystemExit("no error")
except hcomm.InvalidArgumentError:
    pass
print("ok: exceptions")

# SharedMemoryChannel between local processes
name = "pyinstall-" + os.environ["HCOMM_JOB_KEY"]  # the token is a secret
if rank == 0:
    with hcomm.SharedMemoryChannel(name, 4096, create=True) as ch:
        hcomm.barrier()
        msgs = sorted(ch.read(timeout_ms=10000) for _ in range(size - 1))
        assert msgs == [b"rank 1", b"rank 2", b"rank 3"], msgs
        hcomm.barrier()
else:
    hcomm.barrier()
    with hcomm.SharedMemoryChannel(name, 4096) as ch:
        ch.write(b"rank %d" % rank)
    hcomm.barrier()
print("ok: channel")

hcomm.destroy()
print("ok: all")
PY

out="$work/out.txt"
# Only the installed tree: a clean environment apart from PATH and HOME.
(cd "$work" && timeout -k 5 120 env -i PATH=/usr/bin:/bin HOME="$work" \
   PYTHONPATH="$prefix/python" "$prefix/bin/hcomm_run" -n 4 --timeout 90 -- \
   /usr/bin/python3 "$work/app.py") >"$out" 2>&1
rc=$?
cat "$out"
[[ $rc -eq 0 ]] || fail "the installed Python package failed (exit $rc)"
for r in 0 1 2 3; do
  grep -qxF "[rank $r] ok: all" "$out" || fail "rank $r did not print 'ok: all'"
done

# The package alone imports from the tree and reports the library's version.
ver="$(cd "$work" && env -i PATH=/usr/bin:/bin PYTHONPATH="$prefix/python" /usr/bin/python3 -c \
  'import hcomm, os; assert hcomm.__file__.startswith(os.environ["PYTHONPATH"]); print(hcomm.__version__)')" ||
  fail "import hcomm from $prefix/python failed"
[[ "$ver" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "bad hcomm.__version__ '$ver'"
echo "PASS: the installed Python package works without Bazel (hcomm $ver)"
