#!/bin/bash
# Installs hcomm for programs built outside Bazel (shared/API.md,
# "Installation layout"):
#
#   bazel run //tools:install -- --prefix=DIR
#
#   DIR/include/hcomm/hcomm.h
#   DIR/include/hcomm/hcomm_transport.h, protocol.hpp  (for transport plugins)
#   DIR/lib/libhcomm_c.so              (the library; SONAME libhcomm_c.so)
#   DIR/lib/hcomm/plugins/libhcomm_uds.so  (the plugin example, examples/plugin)
#   DIR/lib/pkgconfig/hcomm.pc
#   DIR/bin/hcomm_run, DIR/bin/hcomm_bench
#   DIR/bin/hcomm-visualize            (HTML report of a profile or bench JSON)
#   DIR/python/hcomm/                  (the Python package: PYTHONPATH=DIR/python)
#   DIR/java/hcomm.jar, DIR/lib/libhcomm_java.so (the Java binding)
#   DIR/go/hcomm/                      (the Go package hcomm.local/hcomm, cgo)
#
# A relative DIR is taken relative to the directory `bazel run` was started
# from. Files come from this binary's runfiles (data of //tools:install).
# Each component is one install_<name> function listed in COMPONENTS; to add
# one, add the function, list it, and add its files to the target's data.
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true  # "&" literal in ${x//p/r}

readonly WORKSPACE_NAME="hcomm"
readonly COMPONENTS=(c_api plugins tools python java go)

usage() {
  cat <<'EOF'
usage: bazel run //tools:install -- --prefix=DIR

Installs the hcomm C headers, libhcomm_c.so, hcomm.pc, the uds plugin,
hcomm_run, hcomm_bench and hcomm-visualize under DIR (include/, lib/,
lib/pkgconfig/, lib/hcomm/plugins/, bin/), and the Python, Java and Go
bindings.

options:
  --prefix=DIR, --prefix DIR   where to install (relative: to the directory
                               `bazel run` was started from)
  -h, --help                   print this message
EOF
}

usage_error() {
  echo "install: $*" >&2
  usage >&2
  exit 2
}

die() {
  echo "install: $*" >&2
  exit 1
}

# --- arguments ---------------------------------------------------------------

prefix=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prefix=*) prefix="${1#--prefix=}" ;;
    --prefix)
      [[ $# -ge 2 ]] || usage_error "--prefix needs a value"
      prefix="$2"
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) usage_error "unknown argument: $1" ;;
  esac
  shift
done
[[ -n "$prefix" ]] || usage_error "missing --prefix=DIR"

if [[ "$prefix" != /* ]]; then
  prefix="${BUILD_WORKING_DIRECTORY:-${BUILD_WORKSPACE_DIRECTORY:-$PWD}}/$prefix"
fi
prefix="$(realpath -m -s -- "$prefix")"  # Absolute and clean; symlinks kept.
if [[ "$prefix" =~ [[:space:]] ]]; then
  echo "install: warning: '$prefix' contains whitespace; hcomm.pc will not work with it" >&2
fi

# --- runfiles ----------------------------------------------------------------

self="$0"
[[ "$self" == /* ]] || self="$PWD/$self"
if [[ -n "${RUNFILES_DIR:-}" && -d "$RUNFILES_DIR" ]]; then
  runfiles="$RUNFILES_DIR"
elif [[ -d "$self.runfiles" ]]; then
  runfiles="$self.runfiles"
elif [[ "$self" == *.runfiles/* ]]; then
  runfiles="${self%%.runfiles/*}.runfiles"
else
  runfiles=""
fi
manifest="${RUNFILES_MANIFEST_FILE:-}"
if [[ -z "$manifest" && -n "$runfiles" && -f "$runfiles/MANIFEST" ]]; then
  manifest="$runfiles/MANIFEST"
fi

# rlocation PATH: the file for runfiles path PATH (relative to the workspace).
rlocation() {
  local key="$WORKSPACE_NAME/$1" found=""
  if [[ -n "$runfiles" && -e "$runfiles/$key" ]]; then
    found="$runfiles/$key"
  elif [[ -n "$manifest" && -f "$manifest" ]]; then
    found="$(awk -v k="$key" '$1 == k { print substr($0, length(k) + 2); exit }' "$manifest")"
  fi
  [[ -n "$found" && -e "$found" ]] ||
    die "cannot find $1 in the runfiles (run me with: bazel run //tools:install -- --prefix=DIR)"
  echo "$found"
}

# --- helpers -----------------------------------------------------------------

# put MODE SRC DEST: copies SRC (read-only in bazel-bin) to DEST with MODE.
put() {
  install -D -m "$1" -- "$2" "$3"
  echo "installed $3"
}

# header_version HEADER: "MAJOR.MINOR.PATCH" from the HCOMM_VERSION_* macros.
header_version() {
  local part value version=""
  for part in MAJOR MINOR PATCH; do
    value="$(sed -n "s/^#[[:space:]]*define[[:space:]]\{1,\}HCOMM_VERSION_${part}[[:space:]]\{1,\}\([0-9]\{1,\}\).*/\1/p" "$1" | head -n 1)"
    [[ -n "$value" ]] || die "no HCOMM_VERSION_${part} in $1"
    version="${version:+$version.}$value"
  done
  echo "$version"
}

# --- components --------------------------------------------------------------

install_c_api() {
  local header lib pc_in version template pc
  header="$(rlocation c_api/include/hcomm/hcomm.h)"
  lib="$(rlocation c_api/libhcomm_c.so)"
  pc_in="$(rlocation tools/hcomm.pc.in)"
  version="$(header_version "$header")"

  put 644 "$header" "$prefix/include/hcomm/hcomm.h"
  rm -f "$prefix/lib/libhcomm_c.so"
  put 755 "$lib" "$prefix/lib/libhcomm_c.so"
  echo "installed $prefix/lib/libhcomm_c.so"

  template="$(<"$pc_in")"
  pc="${template//@PREFIX@/"$prefix"}"
  pc="${pc//@VERSION@/"$version"}"
  printf '%s\n' "$pc" >"$scratch/hcomm.pc"
  put 644 "$scratch/hcomm.pc" "$prefix/lib/pkgconfig/hcomm.pc"
}

# What a transport plugin is built against (hcomm_transport.h, protocol.hpp)
# and the plugin example, built against those headers alone.
install_plugins() {
  local h
  for h in hcomm_transport.h protocol.hpp; do
    put 644 "$(rlocation "c_api/include/hcomm/$h")" "$prefix/include/hcomm/$h"
  done
  rm -f "$prefix/lib/hcomm/plugins/libhcomm_uds.so"
  put 755 "$(rlocation examples/plugin/libhcomm_uds.so)" "$prefix/lib/hcomm/plugins/libhcomm_uds.so"
}

# hcomm-visualize is the script itself (standard library only; its shebang
# is #!/usr/bin/env python3), not Bazel's py_binary launcher.
install_tools() {
  local run bench visualize
  run="$(rlocation tools/hcomm_run)"
  bench="$(rlocation tools/hcomm_bench)"
  visualize="$(rlocation tools/hcomm_visualize.py)"
  put 755 "$run" "$prefix/bin/hcomm_run"
  put 755 "$bench" "$prefix/bin/hcomm_bench"
  put 755 "$visualize" "$prefix/bin/hcomm-visualize"
}

# The Python package: bindings/python/hcomm/*.py and the SWIG extension
# _native.so, whose RUNPATH $ORIGIN/../../lib finds DIR/lib/libhcomm_c.so.
install_python() {
  local key="$WORKSPACE_NAME/bindings/python/hcomm/" names=() name so
  if [[ -n "$runfiles" && -d "$runfiles/$key" ]]; then
    mapfile -t names < <(cd "$runfiles/$key" && ls -1 -- *.py)
  elif [[ -n "$manifest" && -f "$manifest" ]]; then
    mapfile -t names < <(awk -v k="$key" 'index($1, k) == 1 && $1 ~ /\.py$/ {
      print substr($1, length(k) + 1) }' "$manifest")
  fi
  [[ ${#names[@]} -gt 0 ]] || die "no Python package files in the runfiles"
  so="$(rlocation bindings/python/hcomm/_native.so)"
  rm -rf -- "$prefix/python/hcomm"
  for name in "${names[@]}"; do
    put 644 "$(rlocation "bindings/python/hcomm/$name")" "$prefix/python/hcomm/$name"
  done
  put 755 "$so" "$prefix/python/hcomm/_native.so"
}

# The Java binding: the jar and its JNI library, whose RUNPATH $ORIGIN finds
# libhcomm_c.so beside it in DIR/lib.
install_java() {
  local jar jni
  jar="$(rlocation bindings/java/hcomm.jar)"
  jni="$(rlocation bindings/java/libhcomm_java.so)"
  put 644 "$jar" "$prefix/java/hcomm.jar"
  rm -f "$prefix/lib/libhcomm_java.so"
  put 755 "$jni" "$prefix/lib/libhcomm_java.so"
}

# The Go package (module hcomm.local/hcomm): the hand-written sources, go.mod
# and internal/capi/ with the SWIG output, unpacked from the tar that the
# Bazel build also uses. Its cgo flags point at DIR/include and DIR/lib
# (-lhcomm_c, RUNPATH DIR/lib) relative to ${SRCDIR}. A program uses it with
#   go mod init example.com/app
#   go mod edit -require=hcomm.local/hcomm@v0.0.0 -replace=hcomm.local/hcomm=DIR/go/hcomm
#   GOFLAGS=-mod=mod GOPROXY=off go build
install_go() {
  local tarball
  tarball="$(rlocation bindings/go/hcomm_go.tar)"
  rm -rf -- "$prefix/go/hcomm"
  mkdir -p -- "$prefix/go/hcomm"
  tar -xf "$tarball" -C "$prefix/go/hcomm" --no-same-owner --no-same-permissions
  echo "installed $prefix/go/hcomm/ (Go package hcomm.local/hcomm)"
}

# --- main --------------------------------------------------------------------

scratch="$(mktemp -d)"
trap 'rm -rf -- "$scratch"' EXIT

echo "installing hcomm into $prefix"
for component in "${COMPONENTS[@]}"; do
  "install_$component"
done
echo "done. Build C programs with:"
echo "  PKG_CONFIG_PATH=$prefix/lib/pkgconfig cc app.c \$(pkg-config --cflags --libs hcomm)"
echo "Load the uds transport plugin with:"
echo "  HCOMM_PLUGINS=$prefix/lib/hcomm/plugins/libhcomm_uds.so HCOMM_TRANSPORTS=uds"
echo "Make an HTML report of a profile (or of hcomm_bench --json output) with:"
echo "  $prefix/bin/hcomm-visualize hcomm_profile.json"
echo "Use the Python package with:"
echo "  PYTHONPATH=$prefix/python python3 -c 'import hcomm'"
echo "Use the Java binding with:"
echo "  javac -cp $prefix/java/hcomm.jar App.java"
echo "  java -Djava.library.path=$prefix/lib -cp $prefix/java/hcomm.jar:. App"
echo "Use the Go package (cgo) from a module with:"
echo "  go mod edit -require=hcomm.local/hcomm@v0.0.0 -replace=hcomm.local/hcomm=$prefix/go/hcomm"
echo "  GOFLAGS=-mod=mod GOPROXY=off go build"
