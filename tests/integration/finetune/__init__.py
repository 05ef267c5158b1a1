"""Fine-tuning end to end: files, jobs, Celery workers, the trainer, and serving the result."""
