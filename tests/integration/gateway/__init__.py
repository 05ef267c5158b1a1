"""The gateway against a real vLLM CPU engine and a real API process."""
