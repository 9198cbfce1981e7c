"""scripts/mutate.py's list loader and applicability check (the harness itself runs
outside CI: TESTING.md)."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gw_mutate", ROOT / "scripts" / "mutate.py")
mutate = importlib.util.module_from_spec(_spec)
sys.modules["gw_mutate"] = mutate          # dataclasses look their module up there
_spec.loader.exec_module(mutate)

ENTRY = '''
[[mutation]]
id = "{id}"
file = "src.c"
find = "x > n"
replace = "x >= n"
tests = ["tests/test_x.py"]
bug = "off by one"
'''


def test_the_shipped_list_loads_and_names_test_files_that_exist():
    mutations = mutate.load(mutate.DEFAULT_LIST)
    assert len(mutations) >= 40
    for m in mutations:
        assert (ROOT / m.file).is_file(), m.id
        for node in m.tests:
            assert (ROOT / node.split("::")[0]).is_file(), f"{m.id}: {node}"


def test_every_shipped_mutation_applies_to_the_tree():
    """A refactor that moves or repeats a mutation's text leaves the entry not applicable:
    it then guards nothing, and only a full run of the harness (outside CI) would say so.
    Three entries went that way unnoticed (session 48 found them)."""
    stale = {m.id: why for m in mutate.load(mutate.DEFAULT_LIST) if (why := mutate.applicable(m))}
    assert not stale, stale


def test_a_malformed_list_is_refused_naming_the_entry(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text(ENTRY.format(id="a") + ENTRY.format(id="a"))
    with pytest.raises(mutate.ListError, match=r"entry 2 \(a\): id 'a' is used twice"):
        mutate.load(bad)
    bad.write_text(ENTRY.format(id="b").replace('bug = "off by one"\n', ""))
    with pytest.raises(mutate.ListError, match=r"entry 1 \(b\): missing 'bug'"):
        mutate.load(bad)
    bad.write_text(ENTRY.format(id="c") + 'expected = "x"\n')
    with pytest.raises(mutate.ListError, match="unknown field.*expected"):
        mutate.load(bad)


@pytest.mark.parametrize("text,why", [
    ("if (x > n) return;", ""),
    ("if (x > n || x > n) return;", "occurs 2 times"),
    ("if (x >= n) return;", "occurs 0 times"),
])
def test_a_mutation_applies_only_where_its_text_occurs_exactly_once(tmp_path, text, why):
    (tmp_path / "src.c").write_text(text)
    listed = tmp_path / "m.toml"
    listed.write_text(ENTRY.format(id="d"))
    (m,) = mutate.load(listed)
    got = mutate.applicable(m, tmp_path)
    assert (why in got) if why else got == ""


def test_the_first_failing_test_is_read_from_pytest_output():
    out = "..F\nFAILED tests/a.py::test_b[1] - AssertionError\nFAILED tests/a.py::test_c\n"
    assert mutate.first_failure(out) == "tests/a.py::test_b[1]"
