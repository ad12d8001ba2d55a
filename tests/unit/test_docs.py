"""Docs that resolve: every requirement code the code cites is a heading of docs/method.md, every path and
module the docs name exists, module docstrings stay short, and CI runs the README's test command."""

import ast
import io
import re
import tokenize
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHOD = ROOT / "docs" / "method.md"
CODE_DIRS = ("inferopt", "tasks", "flows", "benchmarks", "tests", "scripts")
DOC_FILES = (METHOD, ROOT / "docs" / "architecture.md", ROOT / "README.md")
MAX_MODULE_DOCSTRING_LINES = 15

# The requirement codes of the method: a group letter and a number (M1..M5, L1..L4, C1..C2, B1..B6, K1..K5, A1,
# V1..V5, G1..G4), and E, the worked case. Forms in use: `SPEC M3`, `(L2)`, `G1/G2/K2/K4`, `K5's`, ranges
# `M1–M5` / `K1-K5`, `SPEC E`, `worked case E`, and `E` closing a list (`spec="B2, B3, E"`). Not codes: `A100`,
# `E2E`, `bf16`, `E402` (a digit or letter follows), a CPU's `L2 cache`.
_GROUP = "MLCBKAVG"
_RANGE = re.compile(rf"(?<![\w.])([{_GROUP}])([1-9])\s*[–-]\s*\1?([1-9])(?!\w)")
_CODE = re.compile(rf"(?<![\w.])([{_GROUP}][1-9])(?!\w)(?!\s+cache)")
_CASE = re.compile(r"\b(?:SPEC|worked case|case) E\b|(?<=[1-9], )E\b")
_HEADING = re.compile(r"^#{2,4} +([A-Z][1-9]?) — ", re.M)
_TEXT_TOKENS = {tokenize.COMMENT, tokenize.STRING} | (
    {tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set()
)


def codes_in(text: str) -> set[str]:
    """The requirement codes cited in one piece of prose."""
    found = {m.group(1) for m in _CODE.finditer(text)}
    for m in _RANGE.finditer(text):
        found |= {f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)}
    if _CASE.search(text):
        found.add("E")
    return found


def python_files() -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))


def cited_codes() -> dict[str, list[str]]:
    """code -> where it is cited ("path:line"), over every comment and string of the project's Python files."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in python_files():
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        for tok in tokens:
            if tok.type in _TEXT_TOKENS:
                for code in codes_in(tok.string):
                    where[code].append(f"{path.relative_to(ROOT)}:{tok.start[0]}")
    return dict(where)


def heading_codes() -> list[str]:
    return _HEADING.findall(METHOD.read_text(encoding="utf-8"))


def test_codes_in_reads_the_forms_in_use_and_nothing_else() -> None:
    assert codes_in("the decomposition (SPEC M3) and the roofline (L2)") == {"M3", "L2"}
    assert codes_in("G1/G2/K2/K4; K5's example; M1–M5; K1-K5") == {
        *("G1", "G2", "K2", "K4", "K5", "M1", "M2", "M3", "M4", "M5", "K1", "K3"),
    }
    assert codes_in("the seed's case (SPEC E)") == {"E"} == codes_in("aggressive batching (worked case E)")
    assert codes_in("B2, B3, E") == {"B2", "B3", "E"}
    assert codes_in("A100 and H200 at bf16, E2E p99, noqa: E402, well above any L3 cache, V4a") == set()


def test_every_cited_requirement_code_is_a_heading_of_method_md() -> None:
    cited = cited_codes()
    assert len(cited) > 20, "the extractor found almost nothing: is it still reading the code's comments?"
    missing = {code: sites for code, sites in cited.items() if code not in set(heading_codes())}
    assert not missing, "codes cited in the code but not a heading of docs/method.md:\n" + "\n".join(
        f"  {code}: {', '.join(sites[:5])}{' …' if len(sites) > 5 else ''}" for code, sites in sorted(missing.items())
    )


def test_method_md_headings_are_unique_and_its_links_resolve() -> None:
    text = METHOD.read_text(encoding="utf-8")
    codes = heading_codes()
    assert len(codes) == len(set(codes)), f"a code is a heading twice: {sorted(c for c in codes if codes.count(c) > 1)}"
    slugs = {_slug(h) for h in re.findall(r"^#+ +(.+?)\s*$", text, re.M)}
    broken = sorted(set(re.findall(r"\]\(#([^)]+)\)", text)) - slugs)
    assert not broken, f"links to no heading of docs/method.md: {broken}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_module_docstrings_are_at_most_15_lines() -> None:
    long = []
    for d in ("inferopt", "tasks", "flows"):
        for path in sorted((ROOT / d).rglob("*.py")):
            body = ast.parse(path.read_text(encoding="utf-8")).body
            first = body[0] if body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                n = first.end_lineno - first.lineno + 1
                if n > MAX_MODULE_DOCSTRING_LINES:
                    long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not long, (
        f"module docstrings over {MAX_MODULE_DOCSTRING_LINES} lines (say what the file is for):\n" + "\n".join(long)
    )


_PATH = re.compile(r"(?<![\w./-])((?:inferopt|tasks|flows|benchmarks|tests|scripts|configs|docs)/[\w./-]*[\w/])")
_MODULE = re.compile(r"(?<![\w.])(inferopt(?:\.\w+)+)")


def _resolves(dotted: str) -> bool:
    """`inferopt.a.b` names a module or package, or a top-level name (def, class, assignment) of one."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        for module in (base.with_suffix(".py"), base / "__init__.py"):
            if module.is_file():
                rest = parts[i:]
                return not rest or (len(rest) == 1 and rest[0] in _top_level_names(module))
    return False


def _top_level_names(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


@pytest.mark.parametrize("doc", [p for p in DOC_FILES if p.exists()], ids=lambda p: p.name)
def test_docs_name_only_files_and_modules_that_exist(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    paths = {m.split("::")[0] for m in _PATH.findall(text) if "*" not in m and "<" not in m}
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    # README also names MLflow tags (`inferopt.accepted`), which look like modules: only docs/ is checked for those
    modules = set(_MODULE.findall(text)) if doc.parent == ROOT / "docs" else set()
    missing += sorted(m for m in modules if not _resolves(m))
    assert not missing, f"{doc.name} names what does not exist: {missing}"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"# 2\. run the tests[^\n]*\n(.+)\n", readme).group(1).strip()
    assert "ruff check" in command and "pytest" in command
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ci[-1] == command, f".ci/run's command {ci[-1]!r} is not the README's {command!r}"


def test_readme_layout_lists_every_package_of_inferopt() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^  (\w+)/ ", layout, re.M))
    packages = {p.parent.name for p in (ROOT / "inferopt").glob("*/__init__.py")}
    assert packages <= listed, f"README's layout misses {sorted(packages - listed)}"
    assert listed <= packages, f"README's layout lists packages that do not exist: {sorted(listed - packages)}"
