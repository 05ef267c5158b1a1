"""Canary analysis: each alias canary compared with its stable version, promoted or rolled back."""
