"""Control plane: inference engines (register, inspect, retire)."""
