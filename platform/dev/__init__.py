"""Development helpers: a small model and LoRA adapters the project generates itself."""
