"""The policy package's public surface."""

import loraplex.serving.policy as policy


def test_every_exported_name_exists_once() -> None:
    assert all(hasattr(policy, name) for name in policy.__all__)
    assert len(set(policy.__all__)) == len(policy.__all__)
