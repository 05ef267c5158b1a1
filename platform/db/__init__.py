"""Database: SQLAlchemy models (one module per aggregate) and the session configuration."""
