"""Settings come from LORAPLEX_* variables, typed, with errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from loraplex.settings import EngineEndpoint, Settings, SettingsError


def test_defaults_are_the_embedded_mode() -> None:
    settings = Settings.from_env({})
    assert settings.database_url.startswith("sqlite") and settings.is_embedded


def test_values_are_typed_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "LORAPLEX_PORT": "9000",
            "LORAPLEX_DEBUG": "yes",
            "LORAPLEX_DATA_DIR": "/srv/lpx",
            "LORAPLEX_TTFT_TIMEOUT_S": "2.5",
            "LORAPLEX_ENGINES": '[{"name": "e1", "url": "http://e1:30000", "kind": "sglang"}]',
        }
    )
    assert (
        settings.port == 9000 and settings.debug is True and settings.data_dir == Path("/srv/lpx")
    )
    assert settings.ttft_timeout_s == 2.5
    assert settings.engines == (EngineEndpoint(name="e1", url="http://e1:30000", kind="sglang"),)


@pytest.mark.parametrize(
    "name, value",
    [("LORAPLEX_PORT", "eighty"), ("LORAPLEX_DEBUG", "maybe"), ("LORAPLEX_ENGINES", "not json")],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


def test_settings_round_trip_through_the_environment() -> None:
    settings = Settings(port=1234, engines=(EngineEndpoint(name="a", url="http://a"),), debug=True)
    assert Settings.from_env(settings.to_env()) == settings
