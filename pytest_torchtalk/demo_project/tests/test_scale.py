import pytest

import tinyops


def test_scale_doubles():
    torch = pytest.importorskip("torch")
    pytest.importorskip("tinyops._C", reason="the extension is not built (pip install -e .)")
    x = torch.arange(4.0)
    assert torch.equal(tinyops.scale(x, 2.0), x * 2)
