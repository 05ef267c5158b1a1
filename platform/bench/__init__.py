"""`loraplex bench ...`: benchmarks that print a table, write JSON, against a same-run baseline."""
