"""The import drawing: the project's packages stand on floors, and every import goes down.

A module may import its own package freely and any package on a lower floor;
an import of a package on its own floor or above is an arrow back up the house
(or sideways, where cycles start). The floors, bottom first, are the ones
``docs/development.md`` draws; a new package gets a floor here and there.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

FLOORS: tuple[tuple[str, ...], ...] = (
    ("clag.types", "clag.records"),  # plain data: what a run folder and an episode hold
    ("clag.assets", "clag.hardware", "clag.versions", "clag.config", "clag.cluster_index"),
    ("clag.embed", "clag.llm", "clag.data"),  # models and data
    ("clag.metrics", "clag.answer"),  # scoring (the judge among it) and the one answerer
    ("clag.memory", "clag.tracking"),  # CLAG and the agentic core; W&B logging of a finished run
    ("baselines",),  # the reimplemented methods, on clag.memory's protocol and core
    ("clag.running",),  # one run, end to end
    ("clag.compare", "clag.score", "clag.config_schema"),  # readers of finished runs; the config's checks
    ("clag.tables",),  # the paper's tables from finished runs
    ("clag.run", "clag.judge"),  # command-line entries
)


def package(module: str) -> str:
    """The drawing's unit of a module: ``clag.<name>`` (or ``baselines``)."""
    parts = module.split(".")
    return "baselines" if parts[0] == "baselines" else ".".join(parts[:2])


def floor_of(module: str) -> int:
    unit = package(module)
    for floor, units in enumerate(FLOORS):
        if unit in units:
            return floor
    raise AssertionError(f"{unit} has no floor in tests/test_layers.py: give it one (and in docs/development.md)")


def project_imports(path: Path) -> set[str]:
    """Every project module ``path`` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found.update(name for name in names if name.split(".")[0] in ("clag", "baselines"))
    return found


def modules() -> dict[str, Path]:
    """Every module of the two packages but their (empty) roots."""
    out = {}
    for root in ("clag", "baselines"):
        for path in sorted((REPO / root).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            if name not in ("clag", "baselines"):
                out[name] = path
    return out


def test_every_package_has_a_floor() -> None:
    for name in modules():
        floor_of(name)


def test_every_import_goes_down_the_floors() -> None:
    upward = []
    for name, path in modules().items():
        for target in project_imports(path):
            if package(target) != package(name) and floor_of(target) >= floor_of(name):
                upward.append(f"{name} -> {target} (floor {floor_of(name)} -> {floor_of(target)})")
    assert not upward, "imports that run back up the floors:\n" + "\n".join(sorted(upward))


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The parser finds imports inside functions too, where a lazy arrow back up would hide."""
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from clag.running.build import build_client\n    import clag.tables.render\n")
    assert project_imports(source) == {"clag.running.build", "clag.tables.render"}
    assert floor_of("clag.running.build") > floor_of("clag.records.schema")
