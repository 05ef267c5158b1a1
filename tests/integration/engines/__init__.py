"""Engine driver tests against a real vLLM CPU engine."""
