"""Control plane: inference usage reports."""
