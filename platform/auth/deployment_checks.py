"""Settings a process outside local mode refuses to start with.

The development defaults make `make run` work with nothing configured; anywhere else they
are a hole: with the session secret from this source, anyone can forge a console session
(an operator's included). So outside local mode (`Settings.is_local`) the API does not
start on an empty or placeholder secret, and says which variable to set and how.
"""

from __future__ import annotations

from loraplex.settings import DEV_SECRET_KEY, Settings, SettingsError

MIN_SECRET_CHARS = 32
PLACEHOLDER_MARKS = ("change-me", "changeme", "change_me", "placeholder", "example")
COOKIE_CHOICES = {"auto", "1", "true", "yes", "on", "0", "false", "no", "off"}
NEW_SECRET = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def is_placeholder(secret: str) -> bool:
    """Whether `secret` is empty, the development default, a template's placeholder, or too
    short to resist guessing."""
    value = secret.strip()
    lowered = value.lower()
    return (
        value == DEV_SECRET_KEY
        or len(value) < MIN_SECRET_CHARS
        or any(mark in lowered for mark in PLACEHOLDER_MARKS)
    )


def unsafe_settings(settings: Settings) -> list[str]:
    """What is wrong with `settings` for a process outside local mode, one line each."""
    problems = []
    if settings.secure_cookies.strip().lower() not in COOKIE_CHOICES:
        problems.append(
            f"LORAPLEX_SECURE_COOKIES is {settings.secure_cookies!r}: use auto, true or false"
        )
    if not settings.is_local and is_placeholder(settings.secret_key):
        problems.append(
            "LORAPLEX_SECRET_KEY is empty, a placeholder or shorter than "
            f"{MIN_SECRET_CHARS} characters: it signs console sessions, so anyone who knows "
            f"it can sign in as anyone. Set a long random value, e.g. from `{NEW_SECRET}`"
        )
    return problems


def refuse_unsafe_settings(settings: Settings) -> None:
    """Raise `SettingsError` naming every unsafe setting (the process does not start)."""
    problems = unsafe_settings(settings)
    if problems:
        raise SettingsError("refusing to start outside local mode:\n- " + "\n- ".join(problems))
