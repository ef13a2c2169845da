"""Java plumbing for hcomm without the java_* rules.

java_library/java_binary/java_test need @remote_java_tools_linux, which is a
download (see shared/notes/bazel-offline.md), so Java goes through genrules
that call the system JDK, and runs through sh_binary/sh_test:

  hcomm_java_swig_library  SWIG -java over one interface + javac of the
                           generated and hand-written classes -> one jar, and
                           the JNI library (a cc_binary) beside it.
  hcomm_java_jar           javac of more sources against jars -> a jar.
  hcomm_java_program       runs a main class, optionally as N ranks through
                           //tools:hcomm_run (sh_binary, or sh_test).
  hcomm_java_junit_test    JUnit 4 test classes run by JUnitCore (sh_test).

Labels given to these macros must be in this workspace (//pkg:name or
:name); jars produced by hcomm_java_jar are named NAME.jar.
"""

load("@bazel_skylib//rules:write_file.bzl", "write_file")

JDK = "/usr/lib/jvm/default-java"

# From Debian's junit4 package.
JUNIT_JARS = [
    "/usr/share/java/junit4.jar",
    "/usr/share/java/hamcrest-core.jar",
]

# Class files for Java 11 and later; warnings are errors in library code.
JAVACOPTS = ["--release", "11", "-encoding", "UTF-8", "-Xlint:all", "-Werror", "-implicit:none"]

# Small, quick-starting JVMs: tests start several at once on few cores.
JVM_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xss1m"]

_WORKSPACE = "hcomm"

def _javac(out_jar, classpath, javacopts, sources):
    """A shell command: javac SOURCES (words) into OUT_JAR (a make expression)."""
    return " && ".join([
        "t=$$(mktemp -d \"$${TMPDIR:-/tmp}/hcomm_javac.XXXXXX\")",
        "trap 'rm -rf \"$$t\"' EXIT",
        "%s/bin/javac %s%s -d $$t %s" % (
            JDK,
            " ".join(javacopts),
            (" -cp " + classpath) if classpath else "",
            sources,
        ),
        "%s/bin/jar cf %s -C $$t ." % (JDK, out_jar),
    ])

def _rootpath(label):
    """The runfiles path (relative to the workspace) of a file label here."""
    if label.startswith("@"):
        fail("hcomm_java: labels of other repositories are not supported: " + label)
    if label.startswith("//"):
        pkg, _, name = label[2:].partition(":")
        if not name:
            name = pkg.rpartition("/")[2]
        return (pkg + "/" + name) if pkg else name
    name = label[1:] if label.startswith(":") else label
    pkg = native.package_name()
    return (pkg + "/" + name) if pkg else name

def hcomm_java_swig_library(
        name,
        interface,
        module,
        package,
        jar,
        native_library,
        srcs = [],
        swig_srcs = [],
        swig_includes = [],
        native_deps = [],
        linker_script = None,
        javacopts = JAVACOPTS,
        visibility = None):
    """SWIG -java over `interface`, compiled with the hand-written `srcs`.

    Makes:
      `jar`             the generated classes (package `package`, module
                        class `module`) and `srcs`, compiled together.
      `native_library`  the JNI library (cc_binary, linkshared) of the
                        generated wrapper, linked with `native_deps`, with
                        RUNPATH $ORIGIN so that it finds its C library beside
                        it once installed; `linker_script` (a version script)
                        limits what it exports.
      NAME_wrap.c       the generated JNI wrapper.

    Args:
      interface: the .i file given to SWIG.
      swig_srcs: files that SWIG reads besides `interface` (fragments, headers).
      swig_includes: -I directories for SWIG besides the execution root.
    """
    wrap = name + "_wrap.c"
    native.genrule(
        name = name + "_swig",
        srcs = [interface] + swig_srcs + srcs,
        outs = [wrap, jar],
        cmd = " && ".join([
            "g=$$(mktemp -d \"$${TMPDIR:-/tmp}/hcomm_swig.XXXXXX\")",
            "swig -java -module %s -package %s -I. %s -outdir $$g -o $(location %s) $(location %s)" % (
                module,
                package,
                " ".join(["-I" + i for i in swig_includes]),
                wrap,
                interface,
            ),
            _javac(
                "$(location %s)" % jar,
                None,
                javacopts,
                "$$g/*.java " + " ".join(["$(location %s)" % s for s in srcs]),
            ),
            "rm -rf \"$$g\"",
        ]),
        visibility = visibility,
    )
    linkopts = ["-Wl,-rpath,$$ORIGIN", "-Wl,-soname," + native_library]
    linker_inputs = []
    if linker_script:
        linkopts.append("-Wl,--version-script=$(location %s)" % linker_script)
        linker_inputs.append(linker_script)
    native.cc_binary(
        name = native_library,
        srcs = [wrap],
        # SWIG's code: unused parameters and aliasing casts are its style.
        copts = ["-Wno-unused-parameter", "-fno-strict-aliasing"],
        linkshared = 1,
        linkopts = linkopts,
        additional_linker_inputs = linker_inputs,
        deps = native_deps + ["@bazel_tools//tools/jdk:jni"],
        visibility = visibility,
    )

def hcomm_java_jar(
        name,
        srcs,
        deps = [],
        classpath = [],
        javacopts = JAVACOPTS,
        testonly = None,
        visibility = None):
    """javac `srcs` against the jars `deps` (labels) and `classpath` (absolute
    paths of system jars) into NAME.jar."""
    cp = ":".join(["$(location %s)" % d for d in deps] + classpath)
    native.genrule(
        name = name,
        srcs = srcs + deps,
        outs = [name + ".jar"],
        cmd = _javac("$@", cp, javacopts, " ".join(["$(location %s)" % s for s in srcs])),
        testonly = testonly,
        visibility = visibility,
    )

_LAUNCHER = """#!/usr/bin/env bash
# Generated by hcomm_java_program (tools/bzl/hcomm_java.bzl) for {target}:
# runs {main} on the JVM{ranks_doc}.
set -euo pipefail

# The runfiles folder of this workspace: where `bazel run`/`bazel test`
# start us, or beside the script when it is run directly.
root=""
for d in "${{RUNFILES_DIR:+$RUNFILES_DIR/{ws}}}" "${{TEST_SRCDIR:+$TEST_SRCDIR/{ws}}}" \\
         "$0.runfiles/{ws}" "$PWD"; do
  if [[ -n "$d" && -e "$d/{probe}" ]]; then root="$(cd "$d" && pwd)"; break; fi
done
case "$root:$0" in
  :*.runfiles/*) root="${{0%%.runfiles/*}}.runfiles/{ws}" ;;
esac
if [[ -z "$root" || ! -e "$root/{probe}" ]]; then
  echo "{target}: cannot find {probe} in the runfiles of $0" >&2
  exit 1
fi

cp=""
for j in {jars}; do cp="${{cp:+$cp:}}$root/$j"; done
for j in {classpath}; do cp="${{cp:+$cp:}}$j"; done
libpath=""
for l in {libdirs}; do libpath="${{libpath:+$libpath:}}$root/$l"; done

java=({jdk}/bin/java {jvm_flags} -Djava.library.path="$libpath" -cp "$cp" {main} {main_args})
ranks={ranks}
if [[ $ranks -eq 0 ]]; then
  exec "${{java[@]}}" "$@"
fi

# As ranks of one job; HCOMM_NP overrides the rank count.
ranks="${{HCOMM_NP:-$ranks}}"
launcher=("$root/tools/hcomm_run" -n "$ranks" --timeout {timeout} --)
expect={expect}
if [[ -z "$expect" ]]; then
  exec "${{launcher[@]}}" "${{java[@]}}" "$@"
fi
out="$(mktemp "${{TEST_TMPDIR:-${{TMPDIR:-/tmp}}}}/hcomm_java_out.XXXXXX")"
trap 'rm -f "$out"' EXIT
rc=0
"${{launcher[@]}}" "${{java[@]}}" "$@" 2>&1 | tee "$out" || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL: {target}: the job exited $rc" >&2
  exit "$rc"
fi
for ((r = 0; r < ranks; r++)); do
  if ! grep -qxF "[rank $r] $expect" "$out"; then
    echo "FAIL: {target}: rank $r did not print '$expect'" >&2
    exit 1
  fi
done
echo "PASS: {target}: every rank printed '$expect'"
"""

def _shell_words(words):
    return " ".join(["'" + w.replace("'", "'\\''") + "'" for w in words])

def hcomm_java_program(
        name,
        main_class,
        jars,
        native_libraries = [],
        classpath = [],
        main_args = [],
        jvm_flags = [],
        ranks = 0,
        rank_timeout = 120,
        expect = None,
        test = False,
        data = [],
        **kwargs):
    """Runs `main_class` from `jars` (labels) on the system JVM.

    The JVM gets -Djava.library.path with the folders of `native_libraries`
    (labels). With `ranks` > 0 it runs as that many ranks of one job through
    //tools:hcomm_run (HCOMM_NP overrides the count), killed after
    `rank_timeout` seconds; with `expect`, every rank must also print that
    line. An sh_test when `test`, else an sh_binary; arguments go to main.
    kwargs go to the sh_ rule (size, tags, ...).
    """
    if not jars:
        fail("hcomm_java_program: jars is empty")
    script = name + "_launcher.sh"
    jar_paths = [_rootpath(j) for j in jars]
    lib_dirs = {}
    for lib in native_libraries:
        lib_dirs[_rootpath(lib).rpartition("/")[0] or "."] = True
    ranks_doc = (" as %d ranks through tools/hcomm_run" % ranks) if ranks else ""
    content = _LAUNCHER.format(
        target = "//%s:%s" % (native.package_name(), name),
        main = main_class,
        ranks_doc = ranks_doc,
        ws = _WORKSPACE,
        probe = jar_paths[0],
        jars = _shell_words(jar_paths),
        classpath = _shell_words(classpath),
        libdirs = _shell_words(lib_dirs.keys()),
        jdk = JDK,
        jvm_flags = _shell_words(JVM_FLAGS + jvm_flags),
        main_args = _shell_words(main_args),
        ranks = ranks,
        timeout = rank_timeout,
        expect = _shell_words([expect or ""]),
    )
    write_file(
        name = name + "_script",
        out = script,
        content = content.split("\n"),
        is_executable = True,
        testonly = kwargs.get("testonly"),
    )
    runfiles = jars + native_libraries + data
    if ranks:
        runfiles = runfiles + ["//tools:hcomm_run"]
    if test:
        native.sh_test(name = name, srcs = [script], data = runfiles, **kwargs)
    else:
        native.sh_binary(name = name, srcs = [script], data = runfiles, **kwargs)

def hcomm_java_junit_test(
        name,
        srcs,
        test_classes,
        deps = [],
        native_libraries = [],
        jvm_flags = ["-Xcheck:jni"],
        javacopts = JAVACOPTS,
        **kwargs):
    """JUnit 4: compiles `srcs` against `deps` (jars) and JUnit into
    NAME_classes.jar and runs `test_classes` with JUnitCore. The JVM runs
    with -Xcheck:jni by default, so that JNI misuse fails loudly."""
    hcomm_java_jar(
        name = name + "_classes",
        srcs = srcs,
        deps = deps,
        classpath = JUNIT_JARS,
        javacopts = javacopts,
        testonly = True,
    )
    hcomm_java_program(
        name = name,
        main_class = "org.junit.runner.JUnitCore",
        main_args = test_classes,
        jars = [":%s_classes.jar" % name] + deps,
        classpath = JUNIT_JARS,
        native_libraries = native_libraries,
        jvm_flags = jvm_flags,
        test = True,
        testonly = True,
        **kwargs
    )
