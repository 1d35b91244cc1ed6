"""TorchTalk's user-facing half: the pytest plugin (``plugin``) and the ``torchtalk`` CLI (``cli``)."""
