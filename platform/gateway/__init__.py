"""The OpenAI-compatible inference gateway: /v1 routes, model resolution, SSE relay, usage."""
