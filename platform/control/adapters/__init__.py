"""Control plane: adapters, their versions and aliases."""
