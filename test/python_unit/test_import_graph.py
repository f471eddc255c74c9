"""dadt's Python packages import one way: no module of frameworks/python/dadt imports, at module
level, a module that imports it back (directly or around a longer circle).

A circle works only as long as the import order happens to suit it: a new `from x import y` at the
top of either side turns it into an ImportError with a partly initialised module. The layers are
meant to point down (docs/architecture.md): in dadt.common, exceptions and util, then
process_sets, then basics (init and geometry), then dlpack, in_flight, array_ops and frontend;
above them the front ends. Imports inside functions run after every module has
loaded and are not edges here.

What counts as an edge from module M: `import a.b` and `from a.b import c` at M's top level (also
inside a top-level `try`/`if`), to every module of the package named there; `from pkg import sub`
where `sub` is a submodule is an edge to `sub` only, and to `pkg` when a name imported from it is
not a submodule (it then needs pkg's `__init__` to have run).
"""
import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "frameworks", "python")


def package_modules(root, package):
    """{dotted module name: file} for every .py under root/package."""
    found = {}
    for folder, _, files in os.walk(os.path.join(root, package)):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            dotted = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


def _top_level_imports(tree):
    for node in tree.body:
        body = [node]
        if isinstance(node, ast.Try):
            body = node.body + [n for handler in node.handlers for n in handler.body] + node.orelse
        elif isinstance(node, ast.If):
            body = node.body + node.orelse
        yield from (n for n in body if isinstance(n, (ast.Import, ast.ImportFrom)))


def import_edges(modules):
    """{module: set of modules of `modules` it imports at load time}."""
    edges = {m: set() for m in modules}
    for module, path in modules.items():
        is_package = os.path.basename(path) == "__init__.py"
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in _top_level_imports(tree):
            if isinstance(node, ast.Import):
                targets = {a.name for a in node.names}
            else:
                if node.level:
                    parts = module.split(".")[:len(module.split(".")) - node.level + (1 if is_package else 0)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module
                subs = {base + "." + a.name for a in node.names if base + "." + a.name in modules}
                targets = subs if len(subs) == len(node.names) else subs | {base}
            edges[module] |= {t for t in targets if t in modules and t != module}
    return edges


def circles(edges):
    """The strongly connected components of more than one module, each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_dadt_has_no_import_circle():
    modules = package_modules(ROOT, "dadt")
    assert "dadt.common.basics" in modules and "dadt.torch" in modules, sorted(modules)[:10]
    found = circles(import_edges(modules))
    assert found == [], "modules that import each other at load time (move one import into the " \
                        "function that needs it, or the shared part one layer down): %s" % found


def test_the_check_finds_a_circle_and_allows_submodule_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg import a\n")
    (pkg / "a.py").write_text("from . import b\nimport os\n")
    (pkg / "b.py").write_text("try:\n    from pkg.c import thing\nexcept ImportError:\n    pass\n")
    (pkg / "c.py").write_text("from .a import x\n\ndef later():\n    from pkg import b\n")
    (pkg / "sub" / "__init__.py").write_text("from .. import a\n")
    (pkg / "sub" / "leaf.py").write_text("from pkg.sub import other\n")  # a name of pkg.sub: an edge
    edges = import_edges(package_modules(str(tmp_path), "pkg"))
    assert edges["pkg.a"] == {"pkg.b"}
    assert edges["pkg.sub"] == {"pkg.a"}
    assert edges["pkg.sub.leaf"] == {"pkg.sub"}
    assert circles(edges) == [["pkg.a", "pkg.b", "pkg.c"]]
