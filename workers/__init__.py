"""Celery app, tasks and the trainer."""
