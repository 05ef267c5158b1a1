"""Fine-tuning: dataset validation for OpenAI-format training files."""
