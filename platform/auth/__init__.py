"""Who is calling: API keys, the principal they resolve to, and route access rules."""
