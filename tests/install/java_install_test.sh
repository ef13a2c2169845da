#!/usr/bin/env bash
# Installs hcomm into a temporary prefix with tools/install.sh, then, with
# only that tree (no Bazel, no build paths): compiles a Java program with
# javac -cp DIR/java/hcomm.jar and runs it as 4 ranks with DIR/bin/hcomm_run
# and java -Djava.library.path=DIR/lib (point-to-point, allReduce on an array
# and a direct ByteBuffer, newGroup, a stream, an HcommException). Also
# checks that DIR/lib/libhcomm_java.so finds DIR/lib/libhcomm_c.so through
# RUNPATH $ORIGIN.
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

readonly JDK=/usr/lib/jvm/default-java
install_sh="$(runfile tools/install)" || fail "tools/install not in the runfiles"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/java_install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

RUNFILES_DIR="${RUNFILES_DIR:-$TEST_SRCDIR}" "$install_sh" --prefix="$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "install.sh failed"; }
for f in java/hcomm.jar lib/libhcomm_java.so lib/libhcomm_c.so bin/hcomm_run; do
  [[ -e "$prefix/$f" ]] || fail "missing $prefix/$f"
done

# The JNI library needs libhcomm_c.so and finds it beside itself.
jni="$prefix/lib/libhcomm_java.so"
readelf -d "$jni" | grep -q 'NEEDED.*\[libhcomm_c.so\]' || fail "libhcomm_java.so does not need libhcomm_c.so"
runpath="$(readelf -d "$jni" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
[[ ":$runpath:" == *':$ORIGIN:'* ]] || fail "RUNPATH of libhcomm_java.so is '$runpath', without \$ORIGIN"
resolved="$(env -u LD_LIBRARY_PATH ldd "$jni" | awk '$1 == "libhcomm_c.so" { print $3 }')"
[[ "$resolved" == "$prefix/lib/libhcomm_c.so" ]] ||
  fail "libhcomm_java.so resolves libhcomm_c.so to '$resolved', not $prefix/lib/libhcomm_c.so"
bad="$(nm -D --defined-only "$jni" | awk '$3 != "" {print $3}' | sed 's/@.*//' |
       grep -v -e '^Java_org_hcomm_' -e '^JNI_OnLoad$' -e '^HCOMM_JAVA_' || true)"
[[ -z "$bad" ]] || fail "libhcomm_java.so exports more than JNI entry points: $bad"

mkdir -p "$work/src" "$work/classes"
cat >"$work/src/InstallCheck.java" <<'JAVA'
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.hcomm.Communicator;
import org.hcomm.DType;
import org.hcomm.HcommException;
import org.hcomm.ReduceOp;
import org.hcomm.Status;

public class InstallCheck {
  static void check(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
  }

  public static void main(String[] args) {
    try (Communicator c = Communicator.init()) {
      int rank = c.rank(), size = c.size();
      // Point-to-point around a ring.
      int[] got = new int[1];
      try (org.hcomm.Request s = c.isend(new int[] {rank}, (rank + 1) % size, 5)) {
        check(c.recv(got, Communicator.ANY_SOURCE, 5) == (rank + size - 1) % size, "source");
        s.await();
      }
      check(got[0] == (rank + size - 1) % size, "ring value " + got[0]);
      System.out.println("ok: p2p");
      // allReduce on an array and on a direct ByteBuffer.
      long[] v = {rank, 1};
      c.allReduce(v, ReduceOp.SUM);
      check(v[0] == size * (size - 1) / 2 && v[1] == size, "allReduce long[]");
      ByteBuffer b = ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder());
      b.putFloat(0, rank);
      c.allReduce(b, DType.FLOAT32, ReduceOp.MAX);
      check(b.getFloat(0) == size - 1, "allReduce ByteBuffer");
      System.out.println("ok: allReduce");
      // A group of the first and last ranks.
      try (Communicator g = c.newGroup(new int[] {0, size - 1})) {
        if (rank == 0 || rank == size - 1) {
          int[] one = {1};
          g.allReduce(one, ReduceOp.SUM);
          check(g.size() == 2 && one[0] == 2, "group allReduce");
        } else {
          check(g == null, "non-member got a group");
        }
      }
      System.out.println("ok: newGroup");
      // A stream: an allReduce that completes through its future.
      try (org.hcomm.Stream s = c.stream(1)) {
        long[] w = {rank + 1};
        s.allReduce(w, ReduceOp.SUM).join();
        check(w[0] == size * (size + 1) / 2, "stream allReduce " + w[0]);
      }
      System.out.println("ok: stream");
      // Errors are HcommException with the C status and message.
      try {
        c.send(new int[1], size, 0);
        check(false, "no exception");
      } catch (HcommException e) {
        check(e.kind() == Status.INVALID_ARGUMENT && e.getMessage().contains("out of range"),
            "exception " + e);
      }
      System.out.println("ok: exception");
      c.barrier();
    }
    System.out.println("ok: all");
  }
}
JAVA

unset CLASSPATH LD_LIBRARY_PATH
"$JDK/bin/javac" -cp "$prefix/java/hcomm.jar" -d "$work/classes" "$work/src/InstallCheck.java" ||
  fail "cannot compile against $prefix/java/hcomm.jar"

out="$work/out.txt"
timeout -k 5 120 "$prefix/bin/hcomm_run" -n 4 --timeout 90 -- \
  "$JDK/bin/java" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData -Xcheck:jni \
  -Djava.library.path="$prefix/lib" -cp "$prefix/java/hcomm.jar:$work/classes" InstallCheck \
  >"$out" 2>&1
rc=$?
cat "$out"
[[ $rc -eq 0 ]] || fail "installed Java run exited $rc"
for r in 0 1 2 3; do
  grep -qxF "[rank $r] ok: all" "$out" || fail "rank $r did not print 'ok: all'"
done
if grep -q 'WARNING in native method' "$out"; then fail "-Xcheck:jni warned"; fi

# Without java.library.path the error says what to do.
"$JDK/bin/java" -cp "$prefix/java/hcomm.jar:$work/classes" InstallCheck >"$out" 2>&1 &&
  fail "ran without -Djava.library.path"
grep -q 'java.library.path=DIR/lib' "$out" || { cat "$out"; fail "no hint about java.library.path"; }
echo "PASS: the installed Java binding works without Bazel"
