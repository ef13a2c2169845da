"""The SWIG plumbing of the Python binding (bindings/python).

hcomm_py_library(name, srcs, ...) makes, in the calling package:

  <name>_swig             genrule: swig -python -noproxy -threads over the one
                          interface bindings/hcomm.i -> <name>_wrap.c
  <package>/<module>.so   cc_binary(linkshared): the extension module, linked
                          against libhcomm_c.so (//c_api:hcomm_c); RUNPATH
                          also has $ORIGIN/../../lib, where the installed
                          tree (DIR/python/hcomm/ -> DIR/lib) keeps the library
  <name>                  py_library of `srcs` (the hand-written package) with
                          the extension module as data, importable as
                          `import <package>` (imports = ["."])

Users of the py_library must set legacy_create_init = False on their
py_binary/py_test: the workspace is also named "hcomm", and Bazel's
generated runfiles/hcomm/__init__.py would shadow the package.
"""

# Debian 12's python3-dev; a -isystem path under /usr/include is allowed
# (shared/notes/bazel-offline.md, pitfall 8).
PYTHON_INCLUDE = "/usr/include/python3.11"

def hcomm_py_library(
        name,
        srcs,
        package = "hcomm",
        module = "_native",
        interface = "//bindings:hcomm.i",
        fragment = "hcomm_python.i",
        header = "//c_api:include/hcomm/hcomm.h",
        c_library = "//c_api:hcomm_c",
        python_include = PYTHON_INCLUDE,
        visibility = None):
    wrap = name + "_wrap.c"
    so = "%s/%s.so" % (package, module)

    native.genrule(
        name = name + "_swig",
        srcs = [interface, fragment, header],
        outs = [wrap],
        # -I.: the interface includes "bindings/python/hcomm_python.i";
        # -Ic_api/include: "hcomm/hcomm.h".
        cmd = ("swig -python -noproxy -threads -module %s -I. -Ic_api/include " +
               "-o $@ $(location %s)") % (module, interface),
        message = "SWIG Python " + module,
    )

    native.cc_binary(
        name = so,
        srcs = [wrap],
        copts = [
            "-isystem",
            python_include,
            "-fno-strict-aliasing",
            "-Wno-unused-function",
        ],
        linkopts = ["-Wl,-rpath,$$ORIGIN/../../lib"],
        linkshared = 1,
        visibility = visibility,
        # c_api/interrupt_hook.h: Ctrl-C in blocking calls (hcomm_python.i).
        deps = [c_library, "//c_api:interrupt_hook"],
    )

    native.py_library(
        name = name,
        srcs = srcs,
        data = [":" + so],
        imports = ["."],
        srcs_version = "PY3",
        visibility = visibility,
    )
