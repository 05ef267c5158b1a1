"""LoRA adapters: the PEFT format, validation and object stores."""
