"""Pieces shared by every HTTP controller: paging, schema bases, dependencies."""
