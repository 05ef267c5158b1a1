"""Where a worker sends eval runs' requests."""

from __future__ import annotations

from loraplex.settings import Settings
from loraplex.workers.eval_run import api_url


def test_the_setting_wins() -> None:
    assert api_url(Settings(eval_api_url="http://api.internal:9000")) == "http://api.internal:9000"


def test_without_it_the_api_of_this_deployment_is_called_on_loopback_for_a_wildcard() -> None:
    assert api_url(Settings(host="0.0.0.0", port=8100)) == "http://127.0.0.1:8100"
    assert api_url(Settings(host="10.0.0.5", port=8000)) == "http://10.0.0.5:8000"
