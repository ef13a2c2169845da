"""The Go binding's build: SWIG and the `go` tool in genrules.

rules_go is not available offline (shared/notes/bazel-offline.md), so:

  hcomm_go_library   swig -go -cgo over bindings/hcomm.i, then the
                     installable package tree (DIR/go/hcomm) as one tar.
  hcomm_go_test      `go test -c` of that package plus _test.go files, run by
                     an sh_test (with hcomm_run at hand for multi-process
                     tests).
  hcomm_go_binary    `go build` of a main package that imports
                     hcomm.local/hcomm.

The binaries find libhcomm_c.so through an $ORIGIN-relative RUNPATH, valid
in bazel-bin and in runfiles. The steps themselves are in
bindings/go/go_tool.sh.
"""

_TOOL = Label("//bindings/go:go_tool.sh")
_RUNNER = Label("//bindings/go:go_test_runner.sh")
_LIB = Label("//c_api:libhcomm_c.so")
_HEADER = Label("//c_api:include/hcomm/hcomm.h")
_INTERFACE = Label("//bindings:hcomm.i")
_LAUNCHER = Label("//tools:hcomm_run")

def hcomm_go_library(name, srcs, capi_srcs, go_mod, fragment, visibility = None):
    """The Go package hcomm.local/hcomm as a tar of its installed tree.

    Args:
      name: the tar target; makes NAME.tar (and NAME_swig, the generated
        internal/capi/hcomm.go and hcomm_wrap.c).
      srcs: the package's hand-written .go files (no tests).
      capi_srcs: hand-written .go files of internal/capi (cgo flags).
      go_mod: the module's go.mod.
      fragment: the language fragment that bindings/hcomm.i includes.
      visibility: of the tar.
    """
    swig_go = name + "_capi/hcomm.go"
    swig_c = name + "_capi/hcomm_wrap.c"
    native.genrule(
        name = name + "_swig",
        srcs = [_INTERFACE, fragment, _HEADER],
        outs = [swig_go, swig_c],
        cmd = " ".join([
            "swig -go -cgo -intgosize 64 -package capi -module hcomm",
            "-I. -Ic_api/include",
            "-outdir $$(dirname $(location %s))" % swig_go,
            "-o $(location %s)" % swig_c,
            "$(location %s)" % _INTERFACE,
        ]),
        message = "SWIG Go %s" % name,
    )
    pairs = ["go.mod=$(location %s)" % go_mod]
    pairs += ["$$(basename $(location %s))=$(location %s)" % (s, s) for s in srcs]
    pairs += ["internal/capi/$$(basename $(location %s))=$(location %s)" % (s, s) for s in capi_srcs]
    pairs += [
        "internal/capi/hcomm.go=$(location %s)" % swig_go,
        "internal/capi/hcomm_wrap.c=$(location %s)" % swig_c,
    ]
    native.genrule(
        name = name,
        srcs = [go_mod, swig_go, swig_c] + srcs + capi_srcs,
        outs = [name + ".tar"],
        tools = [_TOOL],
        cmd = "$(location %s) pack $@ %s" % (_TOOL, " ".join(pairs)),
        message = "Go package tree %s" % name,
        visibility = visibility,
    )

def _go_build(name, mode, pkg, srcs, out, executable = False, tags = None):
    native.genrule(
        name = name,
        srcs = [pkg, _LIB, _HEADER] + srcs,
        outs = [out],
        tools = [_TOOL],
        cmd = "$(location %s) %s $@ $(location %s) $(location %s) $(location %s) %s" % (
            _TOOL,
            mode,
            pkg,
            _LIB,
            _HEADER,
            " ".join(["$(location %s)" % s for s in srcs]),
        ),
        executable = executable,
        message = "go %s %s" % ("test -c" if mode == "test" else "build", name),
        tags = tags,
    )

def hcomm_go_test(name, pkg, srcs, size = "medium", tags = None, **kwargs):
    """`go test -c` of the package in the tar `pkg` plus srcs, as an sh_test.

    The test binary gets -test.v and $HCOMM_RUN (the path of
    //tools:hcomm_run), so a test can start ranks of itself.
    """
    binary = name + ".test"
    _go_build(name + "_bin", "test", pkg, srcs, binary)
    native.sh_test(
        name = name,
        size = size,
        srcs = [_RUNNER],
        args = ["$(rootpath :%s)" % binary, "$(rootpath %s)" % _LAUNCHER],
        data = [":" + binary, _LAUNCHER, _LIB],
        tags = tags,
        **kwargs
    )

def hcomm_go_binary(name, srcs, pkg = Label("//bindings/go:hcomm_go"), visibility = None):
    """`go build` of the main package srcs (imports hcomm.local/hcomm).

    Makes the executable file NAME (built by the rule NAME_build: a rule
    and its output may not share a name); put //c_api:libhcomm_c.so beside
    it in the data of whatever runs it.
    """
    _go_build(name + "_build", "binary", pkg, srcs, name, executable = True)
