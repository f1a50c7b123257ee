"""The import contract (ARCHITECTURE.md rule 20): each package imports only the layers below it,
no module imports itself back through others (no circle, imports inside functions included), and
no private name is used across modules. Read off the source with `ast`, so an import inside a
function counts like any other."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[set[str]] = [
    {"errors"},
    {"units", "bounds"},
    {"safeio"},
    {"profiles"},
    {"dsconfig"},
    {"sim"},
    {"scenario", "records"},
    {"sweeps"},
    {"planner"},
    {"runner", "validate"},
    {"api"},        # tierlab/__init__.py, the Python API
    {"commands"},   # one module per verb (tierlab/commands/)
    {"cli"},        # the `main` group: registers the verbs
]
"""Lowest first: a module may import its own layer's other packages only where listed together
and the import is not circular, and any lower layer."""


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", "bench", "lab", "build", "docs") or rel.parts[0].startswith("."):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["tierlab", *parts])] = path
    return out


MODULES = _modules()


def _package(module: str) -> str:
    parts = module.split(".")
    return "api" if len(parts) == 1 else parts[1]


def _imports(module: str) -> list[tuple[str, int, list[str]]]:
    """(imported tierlab module, line, names imported from it) of every import in `module`."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:         # annotations only: never imported at run time
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "tierlab":
            names = [a.name for a in node.names]
            subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in MODULES]
            out += [(s, node.lineno, []) for s in subs]
            if node.module in MODULES and len(subs) < len(names):
                out.append((node.module, node.lineno, [n for n in names
                                                        if f"{node.module}.{n}" not in MODULES]))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno, []) for a in node.names if a.name in MODULES]
    return out


def _rank(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def test_every_package_has_a_layer():
    assert {_package(m) for m in MODULES} <= set().union(*LAYERS)


def test_no_arrow_runs_up():
    up = []
    for module in MODULES:
        for target, line, _ in _imports(module):
            a, b = _package(module), _package(target)
            if a != b and (_rank(b) > _rank(a) or (_rank(b) == _rank(a))):
                up.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} -> {target}")
    assert not up, "\n".join(up)


def test_no_circle():
    graph = {m: {t for t, _, _ in _imports(m) if t != m} for m in MODULES}
    # a package's __init__ re-exporting its modules is not a circle through them
    circles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not circles, "\n".join(circles)


def test_no_private_name_crosses_a_module():
    crossing = []
    for module in MODULES:
        for target, line, names in _imports(module):
            crossing += [f"{MODULES[module].relative_to(ROOT)}:{line}: {target}.{n}"
                         for n in names if n.startswith("_") and not n.startswith("__")]
        tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
        aliases = {a.asname or a.name.split(".")[-1]
                   for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                   for a in node.names
                   if (isinstance(node, ast.ImportFrom) and f"{node.module}.{a.name}" in MODULES)
                   or (isinstance(node, ast.Import) and a.name in MODULES)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                crossing.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno}: "
                                f"{node.value.id}.{node.attr}")
    assert not crossing, "\n".join(crossing)


def _tierlab_names(tree: ast.AST) -> set[str]:
    """Names a test file binds to tierlab modules or objects (import ... as X, from ... import X)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tierlab":
            out |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.asname or a.name.split(".")[0] for a in node.names
                    if a.name.split(".")[0] == "tierlab"}
    return out


def test_no_test_patches_the_product():
    """Issue 28 item 6: tests use the seams the library offers (parameters such as
    runner.train.run(setup=...), compare's train=/check=, calibrate's tasks_of=, and the verbs'
    click context object, commands/seams.py), never monkeypatch.setattr on tierlab's modules."""
    patched = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        ours = _tierlab_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("setattr", "delattr") and node.args:
                target = node.args[0]
                root = target
                while isinstance(root, ast.Attribute):
                    root = root.value
                if (isinstance(root, ast.Name) and root.id in ours) or (
                        isinstance(target, ast.Constant) and str(target.value).startswith("tierlab")):
                    patched.append(f"{path.name}:{node.lineno}")
        for node in ast.walk(tree):       # assignment into a tierlab module: train.setup_engine = f
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                            and t.value.id in ours and t.value.id[0].islower():
                        patched.append(f"{path.name}:{node.lineno}")
    assert not patched, f"tests patch tierlab internals at {patched}"
