"""Control plane: tenants."""
