"""Control plane: users."""
