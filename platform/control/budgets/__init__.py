"""Prices, spend and money budgets: what a token costs, what a tenant spent, and its limits."""
