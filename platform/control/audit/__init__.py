"""Control plane: audit."""
