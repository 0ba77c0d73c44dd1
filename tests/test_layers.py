"""Imports run one way down the package's layers, function-level imports included (a lazy import that goes back
up a layer only hides a cycle), and no subpackage has an import cycle among its own modules."""
import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jaxrl_reason")

# Lowest first. A module may import its own subpackage and any lower layer, never a higher one.
LAYERS = (
    ("tokenization", "rewards", "cpu_malloc", "buckets", "progress", "knobs"),
    ("data",),
    ("models",),
    ("parallel",),
    ("sampling",),
    ("rollout",),  # multi-turn sampling with tools, over the sampler
    ("rl",),
    ("inference",),
    ("methods",),
    ("train",),
    ("experiment",),  # what experiments/ shares: the typed run config, data sources, model I/O, warm-ups, a run
    ("configs",),  # run presets (`python experiments/train.py --config <name>`)
)
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules():
    for dirpath, _, files in os.walk(ROOT):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                yield (rel[: -len(".__init__")] if rel.endswith(".__init__") else rel), path


def _imports(path):
    """(imported module, line, inside a function?) for every jaxrl_reason import in the file."""
    tree = ast.parse(open(path).read())
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
                out.extend((n, child.lineno, in_function) for n in names if n.startswith("jaxrl_reason"))
            elif isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names
                           if a.name.startswith("jaxrl_reason"))
            visit(child, nested)

    visit(tree, False)
    return out


def _layer(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the root package (the public API) sits above everything


MODULES = dict(_modules())


def test_every_subpackage_has_a_layer():
    missing = sorted({_layer(m) for m in MODULES} - set(RANK) - {None})
    assert not missing, f"give these subpackages a place in LAYERS: {missing}"


def test_imports_never_go_up_a_layer():
    bad = []
    for mod, path in MODULES.items():
        src = _layer(mod)
        if src is None:
            continue
        for target, line, lazy in _imports(path):
            dst = _layer(target)
            if dst is None or dst == src:
                continue
            if RANK[dst] > RANK[src]:
                where = " inside a function" if lazy else ""
                bad.append(f"{mod}:{line} imports {target} ({dst} is above {src}){where}")
    assert not bad, "imports that run back up the layers:\n" + "\n".join(bad)


def test_no_import_cycle_inside_a_subpackage():
    graph = {}
    for mod, path in MODULES.items():
        deps = set()
        for target, _, _ in _imports(path):
            # `from pkg.mod import name` names a module or an attribute; keep whichever is a module
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != mod and _layer(target) == _layer(mod) and _layer(mod):
                if not (MODULES[target].endswith("__init__.py") and mod.startswith(target + ".")):
                    deps.add(target)
        graph[mod] = deps
    state, cycles = {}, []

    def dfs(node, stack):
        state[node] = "open"
        for d in sorted(graph.get(node, ())):
            if state.get(d) == "open":
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                dfs(d, stack + [d])
        state[node] = "done"

    for m in sorted(graph):
        if m not in state:
            dfs(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("upward", ["from jaxrl_reason.train.update import make_update"])
def test_the_check_catches_an_upward_import(tmp_path, upward):
    p = tmp_path / "x.py"
    p.write_text(f"def f():\n    {upward}\n")
    (target, _, lazy), = [i for i in _imports(str(p)) if i[0] == "jaxrl_reason.train.update"]
    assert lazy and RANK[_layer(target)] > RANK["sampling"]
