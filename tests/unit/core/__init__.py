"""Unit tests of the core: settings, key secrets, access rules."""
