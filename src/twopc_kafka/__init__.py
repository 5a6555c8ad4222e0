"""Kafka transactions for twopc (confluent-kafka). The sink itself is not implemented yet;
the plugin registers the ``kafka`` backend so ``twopc plugins`` shows its state."""

__all__: list[str] = []
