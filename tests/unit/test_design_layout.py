"""docs/design.md §3 names every module of the packages, and names none that is gone, so the
layout a newcomer reads cannot silently drift from the tree (issue 28).

Every ``*.py`` under the packages below (``__init__.py`` aside: a subpackage is named by its
directory) must appear in §3's text as a backticked path from the repository root, such as
``kvstore/actions/prewrite.py``; every entry of §3's "### Modules" list must still exist.
Pure file reading: no imports of the packages."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

# The packages §3's module list covers (snapview_proto/ is generated; tests/ and scripts/ are not
# packages of the library).
PACKAGES = ("kvstore", "coordinator", "spark_source", "spark_sink", "snapview")

ENTRY = re.compile(r"^- `([^`]+)`", re.M)
BACKTICKED = re.compile(r"`([^`\s]+)`")


def package_modules(root: Path) -> set[str]:
    """Every module of PACKAGES as a path from the repository root, ``__init__.py`` aside."""
    found = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            if path.name == "__init__.py" or "__pycache__" in path.parts:
                continue
            found.add(path.relative_to(root).as_posix())
    return found


def section_3(text: str) -> str:
    """The text of "## 3." up to "## 4."."""
    start = text.find("\n## 3.")
    end = text.find("\n## 4.", start)
    assert start >= 0 and end > start, "docs/design.md has no section between '## 3.' and '## 4.'"
    return text[start:end]


def modules_list(section: str) -> list[str]:
    """The entries of the "### Modules" subsection (up to the next heading): each list item's
    first backticked path."""
    start = section.find("\n### Modules")
    assert start >= 0, "docs/design.md §3 has no '### Modules' subsection"
    end = section.find("\n#", start + 1)
    return ENTRY.findall(section[start : end if end > start else len(section)])


def layout_faults(text: str, modules: set[str], root: Path) -> list[str]:
    """What is wrong with design.md's §3 against the tree: modules it does not name, entries of
    its module list that no longer exist (a ``.py`` file, or a package directory ending in /),
    and entries listed twice."""
    section = section_3(text)
    named = set(BACKTICKED.findall(section))
    faults = [f"missing from design.md §3: {m}" for m in sorted(modules - named)]
    entries = modules_list(section)
    for entry in entries:
        path = root / entry
        if entry.endswith("/"):
            gone = not (path / "__init__.py").is_file()
        else:
            gone = not (entry.endswith(".py") and path.is_file())
        if gone:
            faults.append(f"stale entry in design.md §3 (no such module or package): {entry}")
    seen = set()
    for entry in entries:
        if entry in seen:
            faults.append(f"listed twice in design.md §3: {entry}")
        seen.add(entry)
    return faults


def test_design_md_names_every_module_and_no_stale_one():
    faults = layout_faults(DESIGN.read_text(), package_modules(ROOT), ROOT)
    assert not faults, "\n".join(faults)


def test_the_module_list_is_found_whole():
    """One .py entry per module: a list the parser missed would make the stale check pass vacuously."""
    entries = modules_list(section_3(DESIGN.read_text()))
    assert len([e for e in entries if e.endswith(".py")]) == len(package_modules(ROOT))


def test_the_check_sees_a_missing_and_a_stale_entry():
    """Planted faults: one real entry removed, one bogus path added; both are reported."""
    text = DESIGN.read_text()
    modules = package_modules(ROOT)
    removed = "kvstore/actions/prewrite.py"
    line = next(ln for ln in text.splitlines() if ln.startswith(f"- `{removed}`"))
    planted = text.replace(line + "\n", "", 1)
    bogus = "kvstore/no_such_module.py"
    planted = planted.replace("\n### Modules\n", f"\n### Modules\n\n- `{bogus}`: gone\n", 1)
    # A directory entry whose package is gone is stale too.
    planted = planted.replace("\n### Modules\n", "\n### Modules\n\n- `kvstore/gone/`: gone\n", 1)
    faults = layout_faults(planted, modules, ROOT)
    assert faults == [
        f"missing from design.md §3: {removed}",
        "stale entry in design.md §3 (no such module or package): kvstore/gone/",
        f"stale entry in design.md §3 (no such module or package): {bogus}",
    ]


def test_the_check_sees_a_new_module():
    """Planted: a module the tree gains but the text does not name is reported."""
    text = DESIGN.read_text()
    modules = package_modules(ROOT) | {"spark_sink/ivm/ops/new_operator.py"}
    assert layout_faults(text, modules, ROOT) == [
        "missing from design.md §3: spark_sink/ivm/ops/new_operator.py"
    ]
