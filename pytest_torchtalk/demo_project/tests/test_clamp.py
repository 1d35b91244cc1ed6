import pytest

from tinyops import clamp_abs


def test_clamp_abs_bounds_both_sides():
    torch = pytest.importorskip("torch")
    pytest.importorskip("tinyops._C", reason="the extension is not built (pip install -e .)")
    x = torch.tensor([-3.0, 0.5, 3.0])
    assert clamp_abs(x, 1.0).tolist() == [-1.0, 0.5, 1.0]
