"""The global access guard runs on the event loop, not in a worker thread."""

from __future__ import annotations

import inspect

from loraplex.auth.access import check_access


def test_the_guard_is_a_coroutine_so_litestar_does_not_hop_to_a_thread_per_request() -> None:
    # Litestar runs a plain-function guard through sync_to_thread: at 64 streams that hop
    # showed in py-spy on every request. An async guard runs inline.
    assert inspect.iscoroutinefunction(check_access)
