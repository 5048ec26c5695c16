"""The real world: minikafka's nodes behind TCP sockets, speaking Kafka's binary protocol.

``codec`` turns Kafka protocol frames into the dataclasses of ``minikafka.messages`` and back
(it needs kafka-python, whose protocol classes it builds on); the runtime drives the same
state machines the simulation drives. Import the submodules directly; this package imports
nothing, so ``import minikafka`` never needs kafka-python.
"""
