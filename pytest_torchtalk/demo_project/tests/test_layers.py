import pytest

from tinyops.layers import Scale


def test_scale_layer_halves():
    torch = pytest.importorskip("torch")
    pytest.importorskip("tinyops._C", reason="the extension is not built (pip install -e .)")
    x = torch.ones(3)
    assert torch.equal(Scale(0.5)(x), x / 2)
