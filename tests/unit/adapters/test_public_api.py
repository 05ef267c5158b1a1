"""The adapter package's public surface stays deliberate."""

from __future__ import annotations

import loraplex.adapters
import loraplex.adapters.store


def test_every_exported_name_exists():
    for module in (loraplex.adapters, loraplex.adapters.store):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == []


def test_exports_are_the_documented_ones():
    assert set(loraplex.adapters.store.__all__) == {
        "LocalStore",
        "ObjectStore",
        "S3Store",
        "StoredObject",
        "open_store",
    }
    assert {"unpack_upload", "validate_adapter_dir", "read_base_model_facts"} <= set(
        loraplex.adapters.__all__
    )
