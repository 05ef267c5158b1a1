"""Control plane: keys."""
