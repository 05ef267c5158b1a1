"""Control plane: base models."""
