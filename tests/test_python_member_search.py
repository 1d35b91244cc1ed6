"""A name looked up at run time on a class (``getattr(self, "reset_" + kind)``) matches the
members of every class it extends, however the walk over bases and subclasses first meets
them: the search is bounded by distance, so a class met at the bound through a long path
must still be searched through when a short path reaches it (the result depended on the
order of node ids, and two builds of one tree disagreed)."""

from __future__ import annotations

from tests.select_support import IndexedTree, chain_nodes, selected, tree_fixtures

_SUBCLASSES = "".join(f"class Sub{i}(Sub{i - 1}):\n    pass\n\n\n" for i in range(2, 7))

FILES = {
    "memberpkg/__init__.py": "",
    "memberpkg/base.py": (
        "class Base0:\n"
        "    def reset_weights(self):\n"
        "        return 1\n\n\n"
        "class Base1(Base0):\n"
        "    pass\n"
    ),
    # Owner reaches Base1 directly (one step) and through its subclasses (eight steps,
    # the search's bound), and Base0, where the method lives, only past Base1.
    "memberpkg/owner.py": (
        "from memberpkg.base import Base1\n\n\n"
        "class Owner(Base1):\n"
        "    def reset(self, kind):\n"
        '        return getattr(self, "reset_" + kind)()\n\n\n'
        "class Sub1(Owner):\n"
        "    pass\n\n\n"
        f"{_SUBCLASSES}"
        "class Sub7(Sub6, Base1):\n"
        "    pass\n"
    ),
    "tests/test_owner.py": (
        "from memberpkg.owner import Owner\n\n\n"
        "def test_reset():\n"
        '    assert Owner().reset("weights") == 1\n'
    ),
    "tests/test_other.py": "def test_nothing():\n    assert True\n",
}


shared, tree = tree_fixtures("memberpkg", FILES)


def test_a_computed_member_name_matches_a_base_reached_by_a_short_and_a_long_path(
    tree: IndexedTree,
) -> None:
    tree.replace("memberpkg/base.py", "return 1", "return 2")
    selection = tree.select()
    assert not selection.everything, selection.everything
    assert "tests/test_owner.py" in selected(selection)
    assert "memberpkg.owner.Owner.reset" in chain_nodes(selection, "tests/test_owner.py")
    assert "tests/test_other.py" not in selected(selection)
