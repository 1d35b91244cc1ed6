from tinyops.units import human_size


def test_human_size():
    assert human_size(512) == "512 B"
    assert human_size(1536) == "1.5 KiB"
