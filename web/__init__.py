"""The web console and admin UI."""
