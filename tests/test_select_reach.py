"""What one walk takes from another (indexer.select.reach): the state a walk leaves to
more evidence joins the taker's without losing what either knew, and an Overlay reads
as the dict it stands for. (On the real trees the hub's walk leaves no module reached
for some names only; these cases are made here.)"""

from __future__ import annotations

from indexer.select.reach import Overlay, Reach, Step

LIVE, NAMED, WHOLE, NEW = 1, 2, 3, 4  # module ids


def _reach(**modules: frozenset[str] | None) -> Reach:
    """A walk holding modules by name: None for live, names for some names only."""
    reach = Reach()
    ids = {"live": LIVE, "named": NAMED, "whole": WHOLE}
    for name, names in modules.items():
        node = ids[name]
        reach.steps[node] = None
        reach.origin[node] = 0
        if names is None:
            reach.import_live.add(node)
        elif names:
            reach.module_names[node] = names
    return reach


def test_joined_state_keeps_the_stronger_reading_of_each_module() -> None:
    reach = _reach(live=None, named=frozenset({"a"}), whole=frozenset())
    whole = reach.held_whole([LIVE, NAMED, WHOLE, NEW])
    assert whole == {WHOLE}  # reached, neither live nor for some names: all of it
    reach.join_state(
        import_live=[NEW],
        module_names={LIVE: ["x"], NAMED: ["b"], WHOLE: ["y"], NEW: ["z"]},
        deferred_calls=[(NAMED, 9), (NEW, 9)],
        whole=whole,
    )
    assert reach.import_live == {LIVE, NEW}
    # Live stays live, whole stays whole, names add up; a module now live has none.
    assert reach.module_names == {NAMED: frozenset({"a", "b"})}
    # A deferred call of a module live by now is settled: importing it runs the code.
    assert reach.deferred_calls == [(NAMED, 9)]


def test_graft_adds_a_walk_through_its_root_and_keeps_what_was_reached() -> None:
    reach = Reach()
    reach.steps.update({10: None, 11: Step(10, "calls", 11, 10, 1, 5)})
    reach.origin.update({10: 0, 11: 0})
    reach.kind.update({10: "cpp_function", 11: "cpp_function"})
    reach.file_id.update({10: 1, 11: 1})
    reach.depth.update({11: 1})
    other = Reach()  # a walk from 11 alone
    other.steps.update(
        {11: None, 12: Step(11, "calls", 12, 11, 1, 7), 10: Step(12, "calls", 10, 12, 1, 3)}
    )
    other.origin.update({11: 0, 12: 0, 10: 0})
    other.kind.update({11: "cpp_function", 12: "op", 10: "cpp_function"})
    other.file_id.update({11: 1, 12: 2, 10: 1})
    other.depth.update({12: 1, 10: 2})
    other.import_live.add(12)
    added = reach.graft(other, 11)
    assert added == [12]
    assert reach.steps[10] is None  # held before: its own step stays
    assert reach.depth[12] == 2 and reach.origin[12] == 0 and reach.kind[12] == "op"
    assert [s.prev for s in reach.chain(12)] == [10, 11]
    assert 12 in reach.import_live


def test_overlay_reads_as_the_dict_it_stands_for() -> None:
    rows = {5: 0, 6: 1, 7: 2}  # key -> row of the other walk
    made: list[int] = []

    def value(row: int) -> str:
        made.append(row)
        return f"row{row}"

    own = {1: "own1", 6: "own6"}
    overlay = Overlay(own, rows, value, extra=sum(1 for k in rows if k not in own))
    assert len(overlay) == 4 and set(overlay) == {1, 5, 6, 7}
    assert overlay[6] == "own6" and overlay.get(5) == "row0" and overlay.get(8, "-") == "-"
    assert 7 in overlay and 8 not in overlay
    assert dict(overlay.items()) == {1: "own1", 6: "own6", 5: "row0", 7: "row2"}
    overlay[7] = "mine"  # a key the rows hold, now this walk's own
    overlay[9] = "new"
    assert len(overlay) == 5 and overlay[7] == "mine" and own[9] == "new"
    assert 1 not in made  # values of rows are made only when read
