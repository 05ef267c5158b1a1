"""Node credentials: minted by operators, one engine name each, revocable."""
