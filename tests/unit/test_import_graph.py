"""The project's import graph, read with `ast` (nothing is imported): no cycle between modules, no import upward
against LAYERS, and no function-local import without a `# lazy: <reason>` comment on its line or the line above.

Every import counts, at module level and inside functions (a function-local import still ties the layers together;
it only hides the loop until the function runs). Deliberately not checked: tasks/ and flows/ (they sit above all of
`inferopt`), and third-party modules' own imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "inferopt"

# Low -> high (DESIGN.md "Layout"). A module may import its own package and any package of a lower layer;
# packages that share a layer are independent of each other. The most specific prefix names a module's package.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("records", "model.builtin"),  # raw records + clocks; the builtin models' registry (yaml specs, names)
    ("config",),  # pydantic models + load_config (validates builtin model names)
    ("workload", "stats"),  # request tables; paired tests, CIs, quantiles
    ("transport", "model"),  # HTTP/1.1, SSE, Prometheus, OTLP, retry policy; model loading, memory, training
    ("engines",),  # the Engine protocol and its implementations
    ("measure",),  # step 1: the open-loop runner, sessions, phases, slices, resources
    ("locate",),  # step 2
    ("choose",),  # step 3
    ("ablate", "validate"),  # steps 4 and 5
    ("simulate",),  # the fitted cost model, the scheduler simulation, its calibration against capacity probes
    ("choose.ranking",),  # the search's points, their ranking by capacity (validate's results) and decision
    ("choose.duels", "choose.sampler", "choose.pruning"),  # head-to-head probes; which points to try; pruning
    ("choose.points", "choose.case"),  # the search's points: capacity per point, waves, duels; the case by capacity
    ("choose.search",),  # the search: composes measure, locate, choose's proposals and validate's capacity
    ("gate",),  # step 6
    ("verdict",),  # decide, the cheat lint, evidence
    ("report",),  # reads a run directory only
    ("compare", "interop"),  # two runs side by side; Benchmark Reports out, GuideLLM/AIPerf files in
)

# Third-party modules that may be imported inside a function without a per-line comment, and why they stay lazy.
LAZY_THIRD_PARTY: dict[str, str] = {
    "torch": "~2 s to import; config checks, fake and HTTP engines, the report and the CLI never need it",
    "transformers": "imports torch",
    "torchao": "optional quantization backend (the arm is skipped without it)",
    "tokenizers": "only the builtin model's build and the quality model's training make a tokenizer",
    "datasets": "only the quality model's training reads a corpus through it",
    "lm_eval": "imports torch, transformers and datasets; only the sliced quality gate runs it",
    "vllm": "optional serving engine, absent on most machines",
    "opentelemetry": "protobuf decoding, only where vLLM's OTLP spans are received",
    "pynvml": "NVML binding, only where an NVIDIA driver is sampled",
    "psutil": "only process-tree sampling of launched servers needs it",
    "aiohttp": "the HTTP client stack, only where an engine or a scrape talks HTTP",
    "scipy": "~0.3 s to import; only the statistics that need its distributions",
    "pyarrow": "parquet I/O only where a trace is read",
}

PROJECT = "inferopt"
LAZY_TAG = "# lazy:"


@dataclass(frozen=True)
class Edge:
    """One import statement of a project module, resolved to the module it makes Python run."""

    source: str
    target: str  # a project module, or the top-level name of a third-party/stdlib module
    line: int
    local: bool  # inside a function body
    reason: str | None  # the text after `# lazy:` on the statement's line or the line above


def module_paths() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its `__init__.py`)."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = [PROJECT, *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = module_paths()


def _resolve(name: str) -> str:
    """The longest known module that `name` (a module or a module.attribute) starts with."""
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


def _imported_names(node: ast.Import | ast.ImportFrom, source: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: resolve against the importing module's package
        pkg = source if MODULES[source].name == "__init__.py" else source.rpartition(".")[0]
        pkg = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1])
        base = f"{pkg}.{base}" if base else pkg
    for alias in node.names:
        full = f"{base}.{alias.name}"
        yield full if _resolve(full) == full else base


def _lazy_reason(lines: list[str], lineno: int) -> str | None:
    for text in (lines[lineno - 1], lines[lineno - 2] if lineno >= 2 else ""):
        if LAZY_TAG in text:
            return text.split(LAZY_TAG, 1)[1].strip() or None
    return None


def _walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, in_function
        nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _walk(child, nested)


def module_edges(source: str) -> list[Edge]:
    text = MODULES[source].read_text()
    lines = text.splitlines()
    edges: dict[tuple[str, int], Edge] = {}  # one edge per statement and module it makes Python run
    for node, local in _walk(ast.parse(text), in_function=False):
        for name in _imported_names(node, source):
            target = _resolve(name) if name.split(".")[0] == PROJECT else name.split(".")[0]
            if target != source:
                edges[target, node.lineno] = Edge(source, target, node.lineno, local, _lazy_reason(lines, node.lineno))
    return list(edges.values())


EDGES = [edge for module in MODULES for edge in module_edges(module)]
PROJECT_EDGES = [e for e in EDGES if e.target.split(".")[0] == PROJECT]


def package_of(module: str) -> str:
    """The most specific LAYERS entry that names `module` ('' for the top-level package itself)."""
    rest = module.removeprefix(PROJECT).lstrip(".")
    names = [name for layer in LAYERS for name in layer if rest == name or rest.startswith(name + ".")]
    return max(names, key=len, default="")


LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def find_cycles(edges: list[Edge]) -> list[list[str]]:
    """One concrete cycle per strongly connected component of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in edges:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp.append(member)
                        if member == node:
                            break
                    if len(comp) > 1:
                        components.append(comp)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return [_cycle_in(sorted(comp), graph) for comp in components]


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path start -> ... -> start inside one strongly connected component (breadth first)."""
    members, start = set(component), component[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in parent:
                    parent[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"not a cycle: {component}")


def upward_imports(edges: list[Edge]) -> list[str]:
    out = []
    for e in edges:
        src, dst = package_of(e.source), package_of(e.target)
        if src == dst or dst == "":
            continue
        if src == "" or LAYER_OF[dst] >= LAYER_OF[src]:
            kind = "same layer" if src and LAYER_OF[dst] == LAYER_OF[src] else "upward"
            out.append(f"{e.source}:{e.line} imports {e.target} ({kind}: {src or PROJECT} -> {dst})")
    return out


def unexplained_local_imports(edges: list[Edge]) -> list[str]:
    out = []
    for e in edges:
        if not e.local or e.reason:
            continue
        if e.target.split(".")[0] in LAZY_THIRD_PARTY:
            continue
        out.append(f"{e.source}:{e.line} imports {e.target} inside a function without `{LAZY_TAG} <reason>`")
    return out


def test_every_package_has_a_layer() -> None:
    unplaced = sorted({m for m in MODULES if m != PROJECT and package_of(m) == ""})
    assert not unplaced, f"add these to LAYERS: {unplaced}"
    named = [name for layer in LAYERS for name in layer]
    assert len(named) == len(set(named)), "a package is named in two layers"
    missing = [n for n in named if not any(package_of(m) == n for m in MODULES)]
    assert not missing, f"LAYERS names packages that do not exist: {missing}"


def test_no_import_cycle() -> None:
    cycles = find_cycles(PROJECT_EDGES)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_upward_import() -> None:
    bad = upward_imports(PROJECT_EDGES)
    assert not bad, "imports against LAYERS (low -> high: a module imports its own layer or lower):\n" + "\n".join(bad)


def test_function_local_imports_state_why() -> None:
    bad = unexplained_local_imports(EDGES)
    assert not bad, "\n".join(bad)


# The checks themselves, on small graphs: each rule fails on the case it exists for.


def _edge(source: str, target: str, local: bool = False, reason: str | None = None) -> Edge:
    return Edge(source, target, 1, local, reason)


def test_a_two_module_circle_is_reported_as_a_cycle() -> None:
    a, b = "inferopt.config.case", "inferopt.config.loader"
    assert find_cycles([_edge(a, b), _edge(b, a)]) == [[a, b, a]]
    assert find_cycles([_edge(a, b)]) == []


def test_a_longer_loop_is_reported_with_every_hop() -> None:
    e, m, t = "inferopt.engines.base", "inferopt.measure.join", "inferopt.transport.otel"
    assert find_cycles([_edge(e, m), _edge(m, t), _edge(t, e)]) == [[e, m, t, e]]


def test_upward_and_same_layer_imports_are_named() -> None:
    upward = upward_imports([_edge("inferopt.engines.base", "inferopt.measure.join")])
    assert upward == ["inferopt.engines.base:1 imports inferopt.measure.join (upward: engines -> measure)"]
    sideways = upward_imports([_edge("inferopt.workload.build", "inferopt.stats.inference")])
    assert sideways and "same layer" in sideways[0]
    assert upward_imports([_edge("inferopt.measure.join", "inferopt.engines.base")]) == []
    assert upward_imports([_edge("inferopt.config.models", "inferopt.model.builtin")]) == []


def test_a_local_project_import_needs_a_reason() -> None:
    target = "inferopt.model.loading"
    assert unexplained_local_imports([_edge("inferopt.gate.drift", target, local=True)])
    assert not unexplained_local_imports([_edge("inferopt.gate.drift", target, local=True, reason="torch")])
    assert not unexplained_local_imports([_edge("inferopt.gate.drift", "torch", local=True)])


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["    from x import y  # lazy: imports torch"], "imports torch"),
        (["    # lazy: vLLM is optional", "    from x import y"], "vLLM is optional"),
        (["    from x import y  # lazy:"], None),
        (["    from x import y  # local: something"], None),
    ],
)
def test_the_lazy_comment_is_read_from_the_line_or_the_line_above(lines: list[str], expected: str | None) -> None:
    assert _lazy_reason(lines, len(lines)) == expected


def test_tasks_and_flows_import_the_project_at_the_top() -> None:
    """tasks/ and flows/ only wire and log: a function-local import of a project module there needs a reason too."""
    root = Path(__file__).resolve().parents[2]
    bad = []
    for path in sorted([*root.glob("tasks/*.py"), *root.glob("flows/*.py")]):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    said = LAZY_TAG in lines[node.lineno - 1] or LAZY_TAG in lines[node.lineno - 2]
                    if (mod or "").split(".")[0] in ("inferopt", "tasks", "flows") and not said:
                        bad.append(f"{path.relative_to(root)}:{node.lineno} imports {mod} inside a function")
    assert not bad, "\n".join(bad)
