#!/usr/bin/env python3
"""Checks the arrows of DESIGN.md ("Layers") over hcomm's code.

Three checks, each failure naming what breaks the rule and which rule:
  1. Bazel dependencies: every direct dep of every library and binary target
     in the checked packages (bazel query, or --query-xml FILE);
  2. #include lines of the library sources (a header reachable through
     another target's deps still counts);
  3. library source files longer than --max-lines (DESIGN.md: no library file
     is longer than about 800 lines).

  python3 tools/check_layers.py                 # from the repository root
  python3 tools/check_layers.py --graph         # each package's dependencies
  python3 tools/check_layers.py --query-xml q.xml --root DIR   # (tests)

Exit status: 0 when every arrow points where DESIGN.md allows, 1 otherwise,
2 when it cannot run (bad arguments, bazel query failed).
"""

import argparse
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

QUERY = ('kind("cc_library|cc_binary|cc_import", //c_api/... + //core/... + //algorithms/... + '
         '//transports/... + //bindings/... + //examples/plugin/...)')

# What each layer may depend on besides itself, the system libraries and
# Bazel's own tools: DESIGN.md's arrows (bindings -> c_api -> core/comm ->
# core/sched -> {algorithms, core/p2p} -> {transports, core/bootstrap,
# core/topology} -> {algorithms/kernels, core/base}) and its "Never" list.
BELOW_P2P = {'transports', 'transport api', 'bootstrap', 'topology', 'kernels', 'base'}
ALLOWED = {
    'bindings': {'c_api', 'contract'},
    # c_api -> nothing below core/comm but the requests; core/base (status
    # codes, configuration keys, fork and Ctrl-C handling) is everyone's floor.
    'c_api': {'comm', 'p2p request', 'base', 'contract'},
    'comm': {'sched', 'profile', 'algorithms', 'p2p', 'p2p request'} | BELOW_P2P,
    'sched': {'profile', 'algorithms', 'p2p', 'p2p request'} | BELOW_P2P,
    'profile': {'base'},
    # An algorithm sees its narrow peers interface (its own), kernels, base.
    'algorithms': {'kernels', 'base'},
    # core/p2p -> the registry, never a concrete transport.
    'p2p': {'p2p request'} | BELOW_P2P,
    'p2p request': {'base'},
    # The registry and the provider drive the concrete transports.
    'transports': {'transport', 'transport api', 'kernels', 'base', 'contract'},
    # A transport -> no other transport, nor core/p2p, core/comm, algorithms.
    'transport': {'transport api', 'kernels', 'base', 'contract'},
    'transport api': {'kernels', 'base', 'contract'},
    'bootstrap': {'base'},
    'topology': {'base'},
    # core/base and algorithms/kernels -> nothing else of hcomm.
    'kernels': set(),
    'base': set(),
    # The public headers include nothing of the library.
    'contract': set(),
    # A plugin is built against the installed headers alone.
    'plugin example': {'contract'},
}
WHO = {
    'bindings': 'a binding',
    'c_api': 'the C API shim',
    'comm': 'core/comm',
    'sched': 'core/sched',
    'profile': 'core/profile',
    'algorithms': 'an algorithm',
    'p2p': 'core/p2p',
    'p2p request': "core/p2p's requests",
    'transports': "the transports' registry",
    'transport': 'a transport',
    'transport api': 'the transport interfaces',
    'bootstrap': 'core/bootstrap',
    'topology': 'core/topology',
    'kernels': 'algorithms/kernels',
    'base': 'core/base',
    'contract': 'the public headers',
    'plugin example': 'the plugin example',
}
# Library sources: what the file-length rule covers.
LIBRARY_DIRS = ('c_api', 'core', 'algorithms', 'transports')
SOURCE_EXT = ('.cc', '.h', '.c', '.hpp')


def layer_of_package(pkg, name=''):
    """The layer of Bazel package `pkg` (target `name`), or None (unchecked)."""
    if pkg == 'c_api':
        return 'contract' if name in ('hcomm_headers', 'transport_headers') else 'c_api'
    if pkg.startswith('bindings'):
        return 'bindings'
    for prefix, layer in (('core/comm', 'comm'), ('core/sched', 'sched'),
                          ('core/profile', 'profile'), ('core/bootstrap', 'bootstrap'),
                          ('core/topology', 'topology'), ('core/base', 'base'),
                          ('algorithms/kernels', 'kernels')):
        if pkg == prefix:
            return layer
    if pkg == 'core/p2p':
        return 'p2p request' if name == 'request' else 'p2p'
    if pkg == 'algorithms':
        return 'algorithms'
    if pkg == 'transports':
        return 'transport api' if name in ('transport', 'transport_protocol') else 'transports'
    if pkg.startswith('transports/'):
        return 'transport'
    if pkg == 'examples/plugin':
        return 'plugin example'
    return None


def split_label(label):
    m = re.match(r'^//([^:]*):(.*)$', label)
    return (m.group(1), m.group(2)) if m else (None, None)


def layer_of_label(label):
    pkg, name = split_label(label)
    return None if pkg is None else layer_of_package(pkg, name)


def layer_of_path(path):
    """The layer of a source file or included header, by its repository path."""
    if path.startswith('hcomm/') or path.startswith('c_api/include/'):
        return 'contract'
    if path == 'core/p2p/request.h' or path == 'core/p2p/request.cc':
        return 'p2p request'
    if path in ('transports/transport.h', 'transports/transport_protocol.h'):
        return 'transport api'
    return layer_of_package(os.path.dirname(path))


def allowed(src, dst, src_pkg='', dst_pkg=''):
    if dst is None or src is None:
        return True
    if src == dst:
        # Within a layer; but one transport never reaches another.
        return src != 'transport' or src_pkg == dst_pkg
    return dst in ALLOWED.get(src, set())


def rule(src):
    may = sorted(ALLOWED.get(src, set()))
    return '%s may depend on %s only (DESIGN.md, Layers)' % (
        WHO.get(src, src), ', '.join(WHO.get(m, m) for m in may) if may else 'nothing else of hcomm')


def query_xml(root):
    try:
        out = subprocess.run(['bazel', 'query', '--output=xml', QUERY], cwd=root, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write('check_layers: bazel query failed: %s\n%s' %
                         (e, getattr(e, 'stderr', '') or ''))
        sys.exit(2)
    return out


def edges_from_xml(text):
    """(target, dep) pairs of the query's rules, testonly targets left out."""
    edges = []
    for r in ET.fromstring(text).findall('rule'):
        if any(b.get('name') == 'testonly' and b.get('value') == 'true'
               for b in r.findall('boolean')):
            continue
        for lst in r.findall('list'):
            if lst.get('name') == 'deps':
                edges += [(r.get('name'), l.get('value')) for l in lst.findall('label')]
    return edges


def check_edges(edges):
    problems = []
    for t, d in edges:
        src, dst = layer_of_label(t), layer_of_label(d)
        if not allowed(src, dst, split_label(t)[0], split_label(d)[0]):
            problems.append('FORBIDDEN dependency: %s -> %s: %s' % (t, d, rule(src)))
    return problems


def library_files(root):
    for top in LIBRARY_DIRS + ('bindings', 'examples/plugin'):
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith('bazel-')]
            for f in filenames:
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def is_library_source(path):
    name = os.path.basename(path)
    return (path.startswith(LIBRARY_DIRS) and '/testdata/' not in path and
            not re.search(r'(_test|_test_util|_bench|_pingpong)\.(cc|h|c)$', name))


def check_includes(root):
    problems = []
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for path in library_files(root):
        if not is_library_source(path) and not path.startswith(('bindings', 'examples/plugin')):
            continue
        src = layer_of_path(path)
        with open(os.path.join(root, path), errors='replace') as f:
            for n, line in enumerate(f, 1):
                m = include.match(line)
                if not m:
                    continue
                dst = layer_of_path(m.group(1))
                if not allowed(src, dst, os.path.dirname(path), os.path.dirname(m.group(1))):
                    problems.append('FORBIDDEN include: %s:%d includes "%s": %s' %
                                    (path, n, m.group(1), rule(src)))
    return problems


def check_sizes(root, max_lines):
    problems = []
    for path in library_files(root):
        if not is_library_source(path):
            continue
        with open(os.path.join(root, path), errors='replace') as f:
            n = sum(1 for _ in f)
        if n > max_lines:
            problems.append('TOO LONG: %s has %d lines; no library file is longer than about 800 '
                            '(DESIGN.md): split it by responsibility' % (path, n))
    return problems


def graph(edges):
    """Each checked package and the hcomm packages its targets depend on; for a
    package whose targets lie in several layers (c_api's public headers, core/p2p's
    requests, the transport interfaces), the targets used."""
    deps = {}
    for t, d in edges:
        tp, dp = split_label(t)[0], split_label(d)[0]
        if tp is None or layer_of_package(tp) is None:
            continue
        deps.setdefault(tp, {})
        if dp is not None and dp != tp and not dp.startswith('third_party'):
            deps[tp].setdefault(dp, set()).add(split_label(d)[1])
    mixed = ('c_api', 'core/p2p', 'transports')
    out = []
    for p, ds in sorted(deps.items()):
        names = [dp + ('(:%s)' % ',:'.join(sorted(ts)) if dp in mixed else '')
                 for dp, ts in sorted(ds.items())]
        out.append('%s -> %s' % (p, ' '.join(names) or '(nothing of hcomm)'))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default='.', help='the repository root')
    ap.add_argument('--query-xml', help="bazel query's XML instead of running it")
    ap.add_argument('--max-lines', type=int, default=900)
    ap.add_argument('--graph', action='store_true', help="print each package's dependencies")
    args = ap.parse_args()
    if args.query_xml:
        with open(args.query_xml) as f:
            text = f.read()
    else:
        text = query_xml(args.root)
    edges = edges_from_xml(text)
    if args.graph:
        print('\n'.join(graph(edges)))
        return 0
    problems = check_edges(edges) + check_includes(args.root) + check_sizes(args.root,
                                                                            args.max_lines)
    for p in problems:
        print(p)
    if problems:
        print('check_layers: %d problem(s)' % len(problems))
        return 1
    print('check_layers: every dependency points where DESIGN.md allows (%d targets\' deps, '
          'includes and file lengths checked)' % len(edges))
    return 0


if __name__ == '__main__':
    sys.exit(main())
