"""The import graph of ams_app: no cycle, and the layers point one way (README.md, "Layout").

Every import counts, also those inside functions and under TYPE_CHECKING: a lazy import hides a
cycle from the interpreter, not from a reader."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ams_app"

#: What a layer must never import: the drivers (HTTP routes, push workers, the processes' entry
#: points) stand on the service, the service on the storage, never the other way round.
FORBIDDEN = {
    # the backends raise their own exceptions (backends/errors.py), never the API's AmsError
    "ams_app.backends": (
        "ams_app.service",
        "ams_app.api",
        "ams_app.push",
        "ams_app.app",
        "ams_app.serve",
        "ams_app.errors",
        "ams_app.errors_http",
    ),
    "ams_app.service": (
        "ams_app.api",
        "ams_app.push",
        "ams_app.pubsub",
        "ams_app.app",
        "ams_app.serve",
        "ams_app.errors_http",
    ),
    "ams_app.api": ("ams_app.push", "ams_app.pubsub", "ams_app.serve", "ams_app.app"),
    # the gRPC door stands on the service and the REST API's declarations (roles, forwarding)
    "ams_app.pubsub": ("ams_app.push", "ams_app.serve", "ams_app.app", "ams_app.errors_http"),
    "ams_app.push": ("ams_app.api", "ams_app.serve", "ams_app.app"),
    "ams_app.wire": ("ams_app.service", "ams_app.api", "ams_app.push"),
    "ams_app.webhook": ("ams_app.service", "ams_app.api", "ams_app.push"),
    # the parent of the workers runs without gevent: never the server, nor what it stands on
    "ams_app.workers": (
        "ams_app.serve",
        "ams_app.app",
        "ams_app.service",
        "ams_app.api",
        "ams_app.push",
        "ams_app.pubsub",
        "ams_app.backends",
    ),
}


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


@cache
def graph() -> dict[str, set[str]]:
    """Each module of ams_app -> the modules of ams_app it imports."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = base.split(".")[: len(base.split(".")) - node.level + 1]
                    source = ".".join(parts + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    found.add(target if target in modules else source)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        edges[name] = {m for m in found if m in modules and m != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_ams_app_imports_itself_round_about() -> None:
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join("  " + " <-> ".join(component) for component in found)


def test_the_layers_point_one_way() -> None:
    wrong = []
    for module, imports in sorted(graph().items()):
        for layer, forbidden in FORBIDDEN.items():
            if module == layer or module.startswith(layer + "."):
                wrong += [
                    f"{module} imports {target}"
                    for target in sorted(imports)
                    if any(target == f or target.startswith(f + ".") for f in forbidden)
                ]
    assert not wrong, "\n".join(wrong)


def test_the_graph_sees_the_imports_it_checks() -> None:
    """A parser that found nothing would pass the tests above: the known edges are there."""
    edges = graph()
    assert "ams_app.service.subscriptions" in edges["ams_app.api.views"]
    assert "ams_app.push.worker" in edges["ams_app.serve"]
    assert "ams_app.service.core" in edges["ams_app.app"]  # inside create_app
    assert "ams_app.wire" in edges["ams_app.webhook"]


def test_the_http_layer_reaches_metadata_only_through_the_service() -> None:
    """No handler or view of ams_app/api reads the store past the service (its cache, its rules)."""
    reach = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((PACKAGE / "api").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "store"
    ]
    assert not reach, "the API reaches the store directly at: " + ", ".join(reach)


def tool_imports(tool: str) -> set[str]:
    """The modules tools/<tool>.py imports, anywhere in it (``from tools import x`` counts as tools.x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse((ROOT / "tools" / f"{tool}.py").read_text())):
        if isinstance(node, ast.ImportFrom):
            source = ".".join(["tools"] * bool(node.level) + ([node.module] if node.module else []))
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_services_tool_does_not_know_the_cluster() -> None:
    """tools/cluster.py stands on tools/services.py, never the other way round (docs/services.md):
    whoever stops the services stops the cluster first."""
    assert "tools.services" in tool_imports("cluster")
    assert "tools.toolkit" in tool_imports("services")
    assert not {m for m in tool_imports("services") if m == "tools.cluster" or m.startswith("tools.cluster.")}
