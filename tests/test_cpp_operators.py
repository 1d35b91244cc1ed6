"""Uses of the tree's overloaded operators are calls to them (indexer/cpp/operators.py,
indexer/cpp/operator_lookup.py): members and free functions, found from the declared class
of an operand, with the evidence line of the use; built-in arithmetic adds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index, Node
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo

VEC = """\
namespace geo {

struct Vec {
  float x;
  Vec operator+(const Vec& other) const { return Vec{x + other.x}; }
  Vec& operator+=(const Vec& other) { x += other.x; return *this; }
  float operator[](int i) const { return i == 0 ? x : 0.0f; }
  Vec operator-() const { return Vec{-x}; }
  bool operator!() const { return x == 0; }
  float operator()(float scale) const { return x * scale; }
};

bool operator==(const Vec& a, const Vec& b) { return a.x == b.x; }
bool operator==(const Vec& a, float b) { return a.x == b; }
int operator<<(int shift, const Vec& v) { return shift; }

struct Handle {
  Vec* target;
  Vec* operator->() const { return target; }
};

struct Iter {
  int at;
  Vec& operator*() const;
  Iter& operator++() { ++at; return *this; }
  Iter operator++(int) { Iter old = *this; ++at; return old; }
};

template <typename T>
struct Lanes {
  T v;
  bool operator<(const Lanes& other) const { return v < other.v; }
  bool operator>(const Lanes& other) const { return other < *this; }
};

template <>
struct Lanes<float> {
  float v;
  bool operator<(const Lanes<float>& other) const { return v < other.v; }
};

template <>
struct Lanes<double> {
  double v;
  bool operator<(const Lanes<double>& other) const { return v < other.v; }
  bool operator>(const Lanes<double>& other) const { return other < *this; }
  bool operator<=(const Lanes<double>& other) const { return !(*this > other); }
};

template <typename T>
Lanes<T> operator-(const Lanes<T>& a, const Lanes<T>& b) { return a; }
template <>
Lanes<float> operator-(const Lanes<float>& a, const Lanes<float>& b) { return a; }
template <>
Lanes<double> operator-(const Lanes<double>& a, const Lanes<double>& b) { return a; }

}  // namespace geo
"""

USE = """\
namespace geo {

float add_them(const Vec& a, const Vec& b) {
  Vec sum = a + b;
  return sum.x;
}

void accumulate(Vec a, const Vec& b) {
  a += b;
}

float index_it(Vec a, int i) {
  return a[i];
}

Vec negate(Vec a) {
  bool empty = !a;
  return -a;
}

float apply_it(Vec f) {
  return f(2.0f);
}

bool equal(Vec a, Vec b) {
  return a == b;
}

int shifted(Vec v) {
  int k = 3;
  return k << v;
}

float through(Handle h) {
  return h->x;
}

float walk(Iter it) {
  ++it;
  it++;
  Vec& v = *it;
  return v.x;
}

float explicit_forms(Vec a, Vec b) {
  int c = operator<<(3, a);
  return a.operator[](0);
}

bool lanes_float(Lanes<float> a, Lanes<float> b) {
  Lanes<float> d = a - b;
  return a < b;
}

template <typename scalar_t>
bool lanes_any(Lanes<scalar_t> a, Lanes<scalar_t> b) {
  Lanes<scalar_t> d = a - b;
  return a < b;
}

int builtins(int i, double d, Vec* p) {
  int j = i + 1;
  double e = d * 2.0 - d;
  j += i;
  Vec* q = p + 1;
  return j << 2;
}

}  // namespace geo
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("cpp-operators")
    repo = make_fixture_repo("miniext", base / "miniext")
    (repo / "csrc/vec.h").write_text(VEC, encoding="utf-8")
    (repo / "csrc/vec_use.cpp").write_text('#include "vec.h"\n' + USE, encoding="utf-8")
    commit_all(repo, "operators")
    return repo, build_private_index(repo, base)


def one(index: Index, qualname: str) -> Node:
    found = [n for n in index.find(qualname, ["cpp_function"]) if n.qualname == qualname]
    assert len(found) == 1, (qualname, found)
    return found[0]


def operator_calls(index: Index, caller: str) -> dict[tuple[str, str], list]:
    """(callee qualname, callee signature) -> the call edges to operators."""
    found: dict[tuple[str, str], list] = {}
    for edge in index.out_edges(one(index, caller).id, ["calls"]):
        target = index.node(edge.dst)
        if "operator" in target.qualname:
            signature = str(target.attrs.get("signature", ""))
            found.setdefault((target.qualname, signature), []).append(edge)
    return found


def assert_reaches(
    built: tuple[Path, Index], caller: str, callee: str, text: str, signature: str | None = None
) -> None:
    repo, index = built
    calls = operator_calls(index, caller)
    matching = [
        edges
        for (name, sig), edges in calls.items()
        if name == callee and (signature is None or sig == signature)
    ]
    assert len(matching) == 1, (caller, calls)
    line = line_of(repo / "csrc/vec_use.cpp", text)
    assert {edge.line for edge in matching[0]} == {line}
    assert all(edge.path == "csrc/vec_use.cpp" for edge in matching[0])


def test_binary_member_operator(built: tuple[Path, Index]) -> None:
    assert_reaches(built, "geo::add_them", "geo::Vec::operator+", "a + b")
    _, index = built
    assert not index.out_edges(one(index, "geo::add_them").id, ["calls"])[0].ambiguous


def test_compound_assignment_and_subscript(built: tuple[Path, Index]) -> None:
    assert_reaches(built, "geo::accumulate", "geo::Vec::operator+=", "a += b")
    assert_reaches(built, "geo::index_it", "geo::Vec::operator[]", "a[i]")


def test_unary_operators(built: tuple[Path, Index]) -> None:
    assert_reaches(built, "geo::negate", "geo::Vec::operator-", "-a")
    assert_reaches(built, "geo::negate", "geo::Vec::operator!", "!a")


def test_object_called_reaches_its_call_operator(built: tuple[Path, Index]) -> None:
    assert_reaches(built, "geo::apply_it", "geo::Vec::operator()", "f(2.0f)")


def test_free_operator_on_the_right_operand(built: tuple[Path, Index]) -> None:
    assert_reaches(built, "geo::shifted", "geo::operator<<", "k << v")


def test_overloads_text_cannot_tell_apart_are_ambiguous(built: tuple[Path, Index]) -> None:
    _, index = built
    calls = operator_calls(index, "geo::equal")
    assert {sig for name, sig in calls if name == "geo::operator=="} == {
        "(const Vec&, const Vec&)",
        "(const Vec&, float)",
    }
    assert all(edge.ambiguous for edges in calls.values() for edge in edges)


def test_arrow_and_iterator_operators(built: tuple[Path, Index]) -> None:
    assert_reaches(built, "geo::through", "geo::Handle::operator->", "h->x")
    assert_reaches(built, "geo::walk", "geo::Iter::operator++", "++it;", "()")
    assert_reaches(built, "geo::walk", "geo::Iter::operator++", "it++;", "(int)")
    _, index = built
    deref = [
        edge
        for (name, _), edges in operator_calls(index, "geo::walk").items()
        if name == "geo::Iter::operator*"
        for edge in edges
    ]
    # Declared, not defined in the tree: no node to reach, so no edge (not a guess).
    assert deref == []


def test_explicit_operator_calls(built: tuple[Path, Index]) -> None:
    assert_reaches(built, "geo::explicit_forms", "geo::operator<<", "operator<<(3, a)")
    assert_reaches(built, "geo::explicit_forms", "geo::Vec::operator[]", "a.operator[](0)")
    _, index = built
    assert {name for name, _ in operator_calls(index, "geo::explicit_forms")} == {
        "geo::operator<<",
        "geo::Vec::operator[]",
    }


def test_an_operator_definition_is_not_a_call_of_itself(built: tuple[Path, Index]) -> None:
    _, index = built
    for name in ("geo::Handle::operator->", "geo::Vec::operator+="):
        assert operator_calls(index, name) == {}, name


def test_builtin_arithmetic_and_pointers_add_no_edges(built: tuple[Path, Index]) -> None:
    _, index = built
    assert operator_calls(index, "geo::builtins") == {}
    # Inside the operators' own bodies: float arithmetic and comparisons, nothing.
    assert operator_calls(index, "geo::Vec::operator+") == {}


def test_a_specialization_picks_its_own_operators(built: tuple[Path, Index]) -> None:
    """``Lanes<float>``: the float specialization's member and free operator; a template
    parameter's ``Lanes<scalar_t>``: the primary template's, not every specialization's."""
    _, index = built
    for caller, wanted in (("geo::lanes_float", "float"), ("geo::lanes_any", "T")):
        calls = operator_calls(index, caller)
        assert set(calls) == {
            (
                "geo::Lanes::operator<",
                f"(const Lanes{'<float>' if wanted == 'float' else ''}&) const",
            ),
            ("geo::operator-", f"(const Lanes<{wanted}>&, const Lanes<{wanted}>&)"),
        }, (caller, calls)
        assert not any(edge.ambiguous for edges in calls.values() for edge in edges)


def test_update_equals_rebuild_when_operators_come_and_go(tmp_path: Path) -> None:
    """Refs in a file left alone re-resolve when another file adds an operator overload, or
    the class an operand is declared with (the operator existed, the class did not: only
    the ref's ``operand_types`` name it)."""
    from indexer.build import build_index
    from indexer.update import update_index
    from indexer.workspace import Workspace
    from tests.test_update_equals_rebuild import assert_same_graph, rebuild_copy

    repo = make_fixture_repo("miniext", tmp_path / "miniext")
    box_operator = (
        "namespace geo {\ntemplate <typename T>\n"
        "bool operator==(const Box<T>& a, const Box<T>& b) { return true; }\n}\n"
    )
    box_use = "namespace geo {\nbool boxes(Box<int> a, Box<int> b) { return a == b; }\n}\n"
    (repo / "csrc/vec.h").write_text(VEC + box_operator, encoding="utf-8")
    (repo / "csrc/vec_use.cpp").write_text('#include "vec.h"\n' + USE + box_use, encoding="utf-8")
    commit_all(repo, "operators")
    workspace = Workspace.resolve(repo)
    build_index(workspace, jobs=1, show_progress=False)
    assert operator_calls(Index(workspace.db_path), "geo::boxes") == {}
    more = "namespace geo {\nbool operator==(const Vec& a, int b) { return false; }\n}\n"
    box = "namespace geo {\ntemplate <typename T>\nstruct Box {\n  T v;\n};\n}\n"
    steps = [
        ("an overload in a new file", lambda: (repo / "csrc/more.cpp").write_text(more)),
        ("the operands' class, in a file nobody includes", lambda: (repo / "csrc/box.h").write_text(box)),
    ]  # fmt: skip
    for number, (name, change) in enumerate(steps):
        change()
        commit_all(repo, name)
        update_index(workspace, jobs=1, show_progress=False)
        assert_same_graph(workspace.db_path, rebuild_copy(repo, tmp_path / f"r{number}"), name)
    assert {name for name, _ in operator_calls(Index(workspace.db_path), "geo::boxes")} == {
        "geo::operator=="
    }


def test_this_in_a_specialization_is_that_specialization(built: tuple[Path, Index]) -> None:
    """``*this > other`` in a member of ``Lanes<double>``: that specialization's
    ``operator>``, not the primary template's or another's."""
    _, index = built
    calls = operator_calls(index, "geo::Lanes::operator<=")
    assert set(calls) == {("geo::Lanes::operator>", "(const Lanes<double>&) const")}, calls
