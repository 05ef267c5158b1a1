"""The control plane: one folder per aggregate (controller, service, schemas)."""
