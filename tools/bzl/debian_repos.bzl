"""Repository rules that expose Debian-packaged Bazel rules offline."""

def _patched_debian_rules_cc_impl(ctx):
    # Debian's rules_cc 0.0.4 calls use_cpp_toolchain(), which Debian's Bazel
    # 4.2.3 lacks; replace it with the toolchain type it stands for.
    ctx.execute(["cp", "-r", ctx.attr.path + "/.", "."])
    for f in [
        "cc/private/rules_impl/cc_flags_supplier.bzl",
        "cc/private/rules_impl/compiler_flag.bzl",
    ]:
        ctx.execute([
            "sed",
            "-i",
            "-e",
            's/, "use_cpp_toolchain")/)/',
            "-e",
            's/use_cpp_toolchain()/["@bazel_tools\\/\\/tools\\/cpp:toolchain_type"]/',
            f,
        ])

debian_rules_cc = repository_rule(
    implementation = _patched_debian_rules_cc_impl,
    attrs = {"path": attr.string(default = "/usr/share/bazel/rules/cc")},
    local = True,
)
