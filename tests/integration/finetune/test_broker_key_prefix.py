"""Two deployments sharing one Redis database keep their tasks apart with
`LORAPLEX_BROKER_KEY_PREFIX`: a worker takes any task on its queue's key, so without a prefix
each would run the other's."""

from __future__ import annotations

import secrets
from dataclasses import replace

from kombu import Connection

from loraplex.finetune.queue import Queue
from loraplex.settings import Settings
from loraplex.workers.celery_app import broker, make_celery

QUEUE = Queue.DEFAULT.value


def _connection(settings: Settings) -> Connection:
    url, options = broker(settings)
    return Connection(url, transport_options=options)


def _waiting(settings: Settings) -> int:
    """Messages waiting on the `default` queue, as these settings' workers see it."""
    with _connection(settings) as connection:
        return int(connection.default_channel.queue_declare(QUEUE).message_count)


def test_a_task_sent_under_one_prefix_is_not_on_the_queue_of_another(settings: Settings) -> None:
    ours = replace(settings, broker_key_prefix=f"loraplex-a-{secrets.token_hex(4)}:")
    theirs = replace(settings, broker_key_prefix=f"loraplex-b-{secrets.token_hex(4)}:")
    make_celery(ours).send_task("loraplex.nothing", queue=QUEUE)
    try:
        assert (_waiting(ours), _waiting(theirs)) == (1, 0)
    finally:
        with _connection(ours) as connection:
            connection.default_channel.queue_purge(QUEUE)
