#!/usr/bin/env python3
"""Link stubs and checks for building the macOS plugin on Linux.

A Mach-O linker needs, for every library the plugin binds to, a list of
what it exports: on a Mac these come from the SDK's .tbd files, which are
not redistributable and not here. The plugin binds to two libraries the
zig toolchain has no stub for:

- Accelerate.framework: rlx-ir (a dependency) links it for its BNNS
  random generators and filters (the functions are listed below, as
  rlx-ir 0.2.19 declares them);
- /usr/lib/libc++.1.dylib: the C++ shim must use the system libc++, the
  one MLX's libmlx.dylib uses, not a second copy (zig links its own libc++
  statically by default: then an exception thrown inside MLX is not caught
  by the shim, and std types differ across the boundary). Its stub lists
  the C++ runtime symbols the plugin leaves undefined, read from a first
  link.

Commands:
  macos_stubs.py accelerate DIR      write DIR/Accelerate.framework/Accelerate.tbd
  macos_stubs.py libcxx DYLIB DIR    write DIR/libcxxsystem.tbd from DYLIB's undefined C++ symbols
  macos_stubs.py check DYLIB         print the load commands; fail on a flat-lookup
                                     undefined symbol or an absolute LC_ID_DYLIB
"""
import os
import sys

ACCELERATE = [
    "_BNNSCreateRandomGenerator", "_BNNSCreateRandomGeneratorWithSeed",
    "_BNNSDestroyRandomGenerator", "_BNNSDirectApplyActivationBatch", "_BNNSInitGumbel",
    "_BNNSRandomFillCategoricalFloat", "_BNNSRandomFillNormalFloat",
    "_BNNSRandomFillUniformFloat", "_BNNSRandomGeneratorGetState",
    "_BNNSRandomGeneratorStateSize", "_BNNSFilterApply",
    "_BNNSFilterCreateLayerFullyConnected", "_BNNSFilterDestroy",
]


def tbd(install_name, symbols):
    body = ",\n                       ".join("'%s'" % s for s in sorted(set(symbols)))
    return (
        "--- !tapi-tbd\n"
        "tbd-version:     4\n"
        "targets:         [ arm64-macos ]\n"
        "install-name:    '%s'\n"
        "exports:\n"
        "  - targets:         [ arm64-macos ]\n"
        "    symbols:         [ %s ]\n"
        "...\n" % (install_name, body)
    )


def macho(path):
    from macholib.MachO import MachO
    return MachO(path)


def undefined(path):
    """(name, library ordinal) of every undefined external symbol."""
    from macholib.SymbolTable import SymbolTable
    st = SymbolTable(macho(path))
    return [(name.decode(), (nl.n_desc >> 8) & 0xFF) for (nl, name) in st.undefsyms]


def is_cxx_runtime(name):
    # Itanium-mangled std:: and runtime entry points, not MLX's own.
    if "mlx4core" in name or "cxxbridge" in name:
        return False
    return name.startswith("__Z") or name.startswith("___cxa_") and name != "___cxa_atexit" \
        or name == "___gxx_personality_v0"


def main(argv):
    if len(argv) >= 2 and argv[0] == "accelerate":
        d = os.path.join(argv[1], "Accelerate.framework")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "Accelerate.tbd"), "w") as f:
            f.write(tbd("/System/Library/Frameworks/Accelerate.framework/Versions/A/Accelerate",
                        ACCELERATE))
        return 0
    if len(argv) >= 3 and argv[0] == "libcxx":
        syms = [n for (n, _) in undefined(argv[1]) if is_cxx_runtime(n)]
        syms.append("___gxx_personality_v0")
        os.makedirs(argv[2], exist_ok=True)
        with open(os.path.join(argv[2], "libcxxsystem.tbd"), "w") as f:
            f.write(tbd("/usr/lib/libc++.1.dylib", syms))
        print("libc++ stub: %d symbols" % len(set(syms)))
        return 0
    if len(argv) >= 2 and argv[0] == "check":
        from macholib import mach_o
        m = macho(argv[1])
        bad = []
        for lc, cmd, data in m.headers[0].commands:
            name = mach_o.LC_NAMES.get(lc.cmd, hex(lc.cmd))
            if name in ("LC_ID_DYLIB", "LC_LOAD_DYLIB", "LC_LOAD_WEAK_DYLIB", "LC_RPATH"):
                value = data.rstrip(b"\0").decode()
                print("%-18s %s" % (name, value))
                if name == "LC_ID_DYLIB" and value.startswith("/"):
                    bad.append("install name is an absolute path: " + value)
            if name == "LC_BUILD_VERSION":
                print("%-18s minos %d.%d" % (name, cmd.minos >> 16, (cmd.minos >> 8) & 0xFF))
        flat = [n for (n, ordinal) in undefined(argv[1]) if ordinal == 0xFE]
        if flat:
            bad.append("%d symbols bound by flat lookup, e.g. %s" % (len(flat), flat[:3]))
        for b in bad:
            print("error: " + b, file=sys.stderr)
        return 1 if bad else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
