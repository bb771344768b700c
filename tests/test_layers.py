"""The package's layers, checked on its source: every import of every module, those inside functions too.

Four layers, each importing only from its own and the ones below it (README.md, Layout, Layers):

0. **pure rules**: row format, difficulty splits, the LR / mask / metric rules, curve math, prefix tables,
   prompt shapes; no torch, verl, Ray, transformers, hydra or OmegaConf (checked here statically and by
   importing them all in one fresh process);
1. **verl-facing**: what verl calls or configures (``training/``, ``cpu/``, the guided hooks, the plugin);
2. **workflow drivers**: curation, the prefix search, the sweep (``workflow/``);
3. **commands**: ``isocompute``'s subcommands and ``python -m verl_isocompute.main``.

Python never complains about an import cycle closed by an import inside a function, nor about one module
reaching for another's private helper; this test does. It also keeps modules small: one over
:data:`MAX_LINES` lines must be on :data:`LONG_MODULES` with the reason it is one room.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "verl_isocompute"

PURE, VERL, WORKFLOW, COMMANDS = 0, 1, 2, 3
LAYER_NAMES = {PURE: "pure rules", VERL: "verl-facing", WORKFLOW: "workflow drivers", COMMANDS: "commands"}

# package (or top-level module) -> layer; a module's layer is its folder's: no module overrides its folder.
LAYERS: dict[str, int] = {
    PACKAGE: PURE,  # the package's own modules: atomic, jsonl, runlog, errors, numeric, settings, _compat, ...
    f"{PACKAGE}.rules": PURE,
    f"{PACKAGE}.data": PURE,
    f"{PACKAGE}.guided": PURE,
    f"{PACKAGE}.scaling": PURE,
    f"{PACKAGE}.training": VERL,
    f"{PACKAGE}.cpu": VERL,
    f"{PACKAGE}.plugin": VERL,
    f"{PACKAGE}.registration_probes": VERL,
    f"{PACKAGE}.workflow": WORKFLOW,
    f"{PACKAGE}.commands": COMMANDS,
    f"{PACKAGE}.main": COMMANDS,
}

# What a pure module may not import, anywhere in it (top-level names).
HEAVY = frozenset({"torch", "verl", "ray", "transformers", "vllm", "sglang", "tensordict", "hydra", "omegaconf"})

MAX_LINES = 400
# module -> why it is one room although longer than MAX_LINES.
LONG_MODULES: dict[str, str] = {
    "scaling/allocation.py": "the allocation rule's four documented steps (docs/ALLOCATION.md), one function each, read top to bottom",
}


def _modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


class Imports:
    """Every import of the package's modules: edges between our modules, private names taken across
    modules, and the third-party top-level names each module imports."""

    def __init__(self, root: Path = ROOT):
        self.modules = _modules(root)
        self.edges: dict[str, set[str]] = {m: set() for m in self.modules}
        self.private: list[str] = []
        self.external: dict[str, set[str]] = {m: set() for m in self.modules}
        for module, path in self.modules.items():
            self._scan(module, path)

    def _owner(self, dotted: str) -> str:
        while dotted and dotted not in self.modules:
            dotted = dotted.rpartition(".")[0]
        return dotted

    def _scan(self, module: str, path: Path) -> None:
        tree = ast.parse(path.read_text(), filename=str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        aliases: dict[str, str] = {}  # local name -> one of our modules
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] != PACKAGE:
                        self.external[module].add(alias.name.split(".")[0])
                        continue
                    self._edge(module, self._owner(alias.name), node)
                    if alias.asname:
                        aliases[alias.asname] = self._owner(alias.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != PACKAGE:
                    self.external[module].add(source.split(".")[0])
                    continue
                for alias in node.names:
                    candidate = f"{source}.{alias.name}"
                    if candidate in self.modules:  # `from pkg import submodule`
                        self._edge(module, candidate, node)
                        aliases[alias.asname or alias.name] = candidate
                        continue
                    target = self._owner(source)
                    self._edge(module, target, node)
                    if _private(alias.name) and target != module:
                        self.private.append(f"{module}:{node.lineno} imports {target}.{alias.name}")
        for node in ast.walk(tree):  # `resolvers._files(...)` on a module imported above
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                target = aliases[node.value.id]
                if _private(node.attr) and f"{target}.{node.attr}" not in self.modules and target != module:
                    self.private.append(f"{module}:{node.lineno} uses {target}.{node.attr}")

    def _edge(self, module: str, target: str, node: ast.AST) -> None:
        if target and target != module:
            self.edges[module].add(target)

    def cycles(self) -> list[list[str]]:
        """Strongly connected components of more than one module (Tarjan's algorithm)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def visit(v: str) -> None:
            index[v] = low[v] = len(index)
            stack.append(v)
            on_stack.add(v)
            for w in sorted(self.edges[v]):
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

        for v in sorted(self.edges):
            if v not in index:
                visit(v)
        return found

    def upward(self) -> list[str]:
        return [
            f"{m} ({LAYER_NAMES[layer(m)]}) imports {t} ({LAYER_NAMES[layer(t)]})"
            for m in sorted(self.edges)
            for t in sorted(self.edges[m])
            if layer(t) > layer(m)
        ]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.fixture(scope="module")
def imports() -> Imports:
    return Imports()


def test_no_import_points_up_a_layer(imports):
    assert imports.upward() == []


def test_no_import_cycle(imports):
    assert imports.cycles() == []


def test_no_private_name_is_used_across_modules(imports):
    assert imports.private == []


def test_pure_modules_import_nothing_heavy(imports):
    pure = [m for m in imports.modules if layer(m) == PURE]
    assert {m: sorted(imports.external[m] & HEAVY) for m in pure if imports.external[m] & HEAVY} == {}


def test_no_module_over_the_limit_off_the_allowlist():
    lines = {str(p.relative_to(ROOT / PACKAGE)): len(p.read_text().splitlines()) for p in _modules().values()}
    assert {p: n for p, n in lines.items() if n > MAX_LINES and p not in LONG_MODULES} == {}
    # the allowlist shrinks with the code: a module back under the limit leaves it
    assert {p: lines.get(p) for p in LONG_MODULES if lines.get(p, 0) <= MAX_LINES} == {}


def test_no_benchmark_is_over_the_limit():
    """The 400-line rule holds for benchmarks/ too (issue 42, item 5): a script over it is split by concept (its
    report, its rules, the reading of run files), not chopped."""
    lines = {p.name: len(p.read_text().splitlines()) for p in sorted((ROOT / "benchmarks").glob("*.py"))}
    assert len(lines) >= 10 and {p: n for p, n in lines.items() if n > MAX_LINES} == {}


def test_the_layer_map_names_only_existing_modules(imports):
    assert [p for p in LAYERS if p not in imports.modules] == []


def folder(module: str) -> str:
    """The room a module stands in at folder level: its top-level folder, or the top-level module itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (ROOT / PACKAGE / parts[-1]).is_dir() else module


def test_the_folders_import_each_other_without_a_cycle(imports):
    """Folder level: ``training/`` may use ``rules/``, never the other way round; no two folders (or top-level
    modules) reach each other, which a per-module layer test alone would allow inside one layer."""
    edges: dict[str, set[str]] = {}
    for module, targets in imports.edges.items():
        for target in targets:
            if folder(target) != folder(module):
                edges.setdefault(folder(module), set()).add(folder(target))
    rooms = Imports.__new__(Imports)
    rooms.edges = {room: edges.get(room, set()) for room in {folder(m) for m in imports.modules}}
    assert rooms.cycles() == []


def test_every_folder_is_one_layer_and_its_docstring_says_which(imports):
    """No module overrides its folder's layer (the map has folders and top-level modules only), and each
    folder's ``__init__`` docstring names the layer the map gives it."""
    assert [p for p in LAYERS if p.count(".") > 1] == []
    wrong = {}
    for name in LAYERS:
        init = ROOT / Path(*name.split(".")) / "__init__.py"
        if name != PACKAGE and init.exists():
            said = ast.get_docstring(ast.parse(init.read_text())) or ""
            if f"Layer: {LAYER_NAMES[LAYERS[name]]}" not in said:
                wrong[name] = LAYER_NAMES[LAYERS[name]]
    assert wrong == {}


def _layer_listing() -> dict[str, set[str]]:
    """The map as the docs write it: layer name -> folders (``rules/``) and top-level modules (``runlog``)."""
    listing: dict[str, set[str]] = {name: set() for name in LAYER_NAMES.values()}
    for module in Imports().modules:
        room = folder(module)
        if room == PACKAGE or room.rpartition(".")[2].startswith("_"):
            continue
        short = room.removeprefix(PACKAGE + ".")
        listing[LAYER_NAMES[layer(room)]].add(short + "/" if (ROOT / PACKAGE / short).is_dir() else short)
    return listing


def test_the_readme_layer_table_is_the_map():
    import re

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| layer | folders and modules | may import |"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = set(re.findall(r"`([^`]+)`", cells[1]))
    assert rows == _layer_listing()


def test_the_package_docstring_lists_the_map():
    import re

    import verl_isocompute

    said = {}
    for item in re.split(r"\n- ", verl_isocompute.__doc__)[1:]:
        name = re.match(r"\*\*([^*]+)\*\*", item).group(1)
        # a name in double backticks right after the start or a comma (not the ones inside parentheses)
        text = re.sub(r"\([^()]*\)", "", item.replace("\n", " "))
        said[name] = set(re.findall(r"``([^`]+)``", text)) - {"python -m verl_isocompute.main"}
    assert said == _layer_listing()


# Fresh processes: what importing a module really loads (a third-party library may pull torch in).
# The pure layer all at once; then the few places that promise to be lighter still.
LIGHT = {
    "pure": (None, ("torch", "verl", "ray", "transformers", "hydra", "omegaconf")),
    "the LR rule": (("verl_isocompute.rules.lr",), ("torch", "verl", "numpy")),
    "`isocompute fit`'s module (the command starts fast)": (("verl_isocompute.commands.fit",), ("pandas", "scipy", "matplotlib", "torch", "verl")),
    "`isocompute allocate` (no verl to decide a budget)": (("verl_isocompute.commands.allocate",), ("hydra", "torch", "verl")),
    "`isocompute prefix-search`'s module and tables": (
        ("verl_isocompute.commands.prefix_search", "verl_isocompute.guided.search_tables"),
        ("torch", "verl", "ray", "transformers"),
    ),
}


@pytest.mark.parametrize("what", list(LIGHT))
def test_importing_loads_nothing_heavy(what, imports):
    modules, heavy = LIGHT[what]
    if modules is None:
        modules = tuple(m for m in imports.modules if layer(m) == PURE)
    code = (
        f"import importlib, sys\nfor m in {list(modules)!r}: importlib.import_module(m)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"importing {what} loaded {proc.stdout.strip()}"


def test_the_checks_catch_what_they_name(tmp_path):
    """A cycle closed inside a function, an upward edge, a private name: each is found."""
    pkg = tmp_path / PACKAGE
    for sub in ("", "scaling", "workflow"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "scaling" / "a.py").write_text("def f():\n    from verl_isocompute.workflow import b\n    return b._helper\n")
    (pkg / "workflow" / "b.py").write_text("from verl_isocompute.scaling.a import f, _g\n")
    found = Imports(tmp_path)
    assert found.cycles() == [["verl_isocompute.scaling.a", "verl_isocompute.workflow.b"]]
    assert found.upward() == ["verl_isocompute.scaling.a (pure rules) imports verl_isocompute.workflow.b (workflow drivers)"]
    assert found.private == [
        "verl_isocompute.scaling.a:3 uses verl_isocompute.workflow.b._helper",
        "verl_isocompute.workflow.b:1 imports verl_isocompute.scaling.a._g",
    ]
